package replay

import (
	"context"
	"reflect"
	"testing"

	"github.com/potato-k3/potato-k3/replay/cpu"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// TestPinHostBuffers: ahead of a wave that reads experts ahead, PinHostBuffers allocates every slot the
// wave's plan allows (and nothing the second time), the wave then allocates none itself, and its results
// are those without read-ahead; a wave too small to read ahead pins nothing.
func TestPinHostBuffers(t *testing.T) {
	seqs := randomSequences(51, 3328, 90, 7, 40)
	lens := []int{90, 7, 40}
	req := Request{Sequences: seqs, Options: Options{TopK: 3, Router: true}}
	want := runOne(t, openTiny(t, ops.BF16, EngineOptions{ExpertReadAhead: -1}), req)
	e, _ := openCounted(t, cpu.New(cpu.Options{Precision: ops.BF16}), EngineOptions{})
	e.aheadBatch = 3
	if n, err := e.PinHostBuffers([]int{3}); err != nil || n != 0 {
		t.Fatalf("a 3-token wave: pinned %d bytes (%v), want none (it reads nothing ahead)", n, err)
	}
	p, err := e.PlanWave(lens)
	if err != nil {
		t.Fatal(err)
	}
	slots := int(p.ExpertReadAhead / e.aheadSlotBytes())
	n, err := e.PinHostBuffers(lens)
	if err != nil {
		t.Fatal(err)
	}
	if slots < 2 || n != int64(slots)*e.aheadSlotBytes() || e.slab.n != slots || len(e.slab.idle) != slots {
		t.Fatalf("pinned %d bytes, %d slots (%d idle); want %d slots of %d bytes", n, e.slab.n, len(e.slab.idle), slots, e.aheadSlotBytes())
	}
	if again, err := e.PinHostBuffers(lens); err != nil || again != 0 {
		t.Errorf("a second call pinned %d bytes (%v), want none", again, err)
	}
	got, st, err := e.Run(context.Background(), []Request{req})
	if err != nil {
		t.Fatal(err)
	}
	if st.ReadAheadBytes == 0 {
		t.Error("the wave read nothing ahead")
	}
	if e.slab.n > slots {
		t.Errorf("the wave allocated slots of its own: %d after, %d pinned", e.slab.n, slots)
	}
	if !reflect.DeepEqual(got, want) {
		t.Error("results differ from a wave without read-ahead")
	}
}
