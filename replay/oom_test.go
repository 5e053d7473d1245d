package replay

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/potato-k3/potato-k3/replay/cpu"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// smallDevice is the CPU backend with the memory of a small device: a MatMul over more than rows rows
// fails with ops.ErrOutOfMemory, as a GPU's allocation would, and leaves the backend usable.
type smallDevice struct {
	ops.Backend
	rows  int
	fails atomic.Int64
}

func (s *smallDevice) MatMul(x, w ops.Tensor) (ops.Tensor, error) {
	if x.Rows() > s.rows {
		s.fails.Add(1)
		return nil, fmt.Errorf("MatMul of %d rows: %w", x.Rows(), ops.ErrOutOfMemory)
	}
	return s.Backend.MatMul(x, w)
}

// TestOutOfMemorySplitsTheWave: a wave the device has no memory for is run again as smaller waves with
// the same results bit for bit, later waves stay below the size that failed, and a sequence that does
// not fit alone fails naming the memory.
func TestOutOfMemorySplitsTheWave(t *testing.T) {
	seqs := randomSequences(13, 3328, 40, 35, 45, 30)
	opts := Options{TopK: 3, Lens: []int{2}, Router: true}
	want := runOne(t, openTiny(t, ops.BF16, EngineOptions{}), Request{Sequences: seqs, Options: opts})
	dev := &smallDevice{Backend: cpu.New(cpu.Options{Precision: ops.BF16}), rows: 100}
	e := openPreset(t, "tiny", 1, dev, EngineOptions{})
	got, st, err := e.Run(context.Background(), []Request{{Sequences: seqs, Options: opts}})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Error("results after the split differ from one wave on a device with the memory")
	}
	if dev.fails.Load() == 0 || st.Tokens != 150 {
		t.Errorf("%d allocations failed, %d tokens replayed; want the full wave to fail once and all 150 tokens", dev.fails.Load(), st.Tokens)
	}
	before := dev.fails.Load()
	if _, _, err := e.Run(context.Background(), []Request{{Sequences: seqs, Options: opts}}); err != nil {
		t.Fatal(err)
	}
	if n := dev.fails.Load() - before; n != 0 {
		t.Errorf("the second request ran out of memory %d times; want its waves kept below the size that failed", n)
	}
	_, _, err = e.Run(context.Background(), []Request{{Sequences: randomSequences(3, 3328, 120, 10)}})
	if !errors.Is(err, ops.ErrOutOfMemory) || !strings.Contains(err.Error(), "does not fit in the device's memory") {
		t.Errorf("a 120-token sequence on a device for 100 rows: %v; want the memory named", err)
	}
	if got := runOne(t, e, Request{Sequences: seqs[:2], Options: opts}); !reflect.DeepEqual(got[0], want[0][:2]) {
		t.Error("after a failed request the engine's results changed")
	}
}
