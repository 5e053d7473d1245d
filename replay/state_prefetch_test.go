package replay

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/potato-k3/potato-k3/replay/cpu"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// prefetching is the counting backend with transfers split in two (ops.PrefetchBF16Transfer), as a
// device's copy stream would run them: PrefetchBF16 holds a copy of the bits (counted as device bytes
// until Take or Drop), Take makes the tensor from it and checks that src did not change in between (the
// engine must leave a buffer on its way alone). failTake makes that Take fail, for the error paths.
// Its queued downloads are on their way as a state stream's are (cuda/state_download.go): the bits
// reach dst when a later transfer reads them or the next queued transfer or Sync comes, and they count
// as device bytes until the latter (ops.QueuedBF16Transfer's contract).
type prefetching struct {
	*counting
	mu                      sync.Mutex
	started, taken, dropped int
	failTake                int // the failTake-th Take fails (0: none)
	changed                 error
	inFlight, mostInFlight  int64 // bytes on their way in, now and at most
	out                     []*outbound
	downloads               int
}

// outbound is a download on its way to host memory.
type outbound struct {
	dst, bits []uint16
	landed    bool
}

// land writes the bits of every download on its way to their buffers, and ends them (their device bytes
// given back) when end is set.
func (p *prefetching) land(end bool) {
	for _, o := range p.out {
		if !o.landed {
			copy(o.dst, o.bits)
			o.landed = true
		}
		if end {
			p.drop(o)
		}
	}
	if end {
		p.out = nil
	}
}

func (p *prefetching) ToHostBF16Queued(x ops.Tensor, dst []uint16) error {
	p.land(true)
	bits := make([]uint16, len(dst))
	if err := p.ToHostBF16(x, bits); err != nil {
		return err
	}
	o := &outbound{dst: dst, bits: bits}
	p.add(o, 2*int64(len(bits)))
	p.out = append(p.out, o)
	p.downloads++
	return nil
}

func (p *prefetching) FromHostBF16Queued(rows, cols int, src []uint16) (ops.Tensor, error) {
	p.land(true)
	return p.FromHostBF16(rows, cols, src) // counted by counting's FromHostBF16
}

func (p *prefetching) Sync() error {
	p.land(true)
	return nil
}

func (p *prefetching) PrefetchBF16(rows, cols int, src []uint16) (ops.Prefetched, error) {
	if len(src) != rows*cols {
		return nil, fmt.Errorf("PrefetchBF16: %dx%d from %d values", rows, cols, len(src))
	}
	p.land(false) // a download queued before reads first
	x := &inFlight{p: p, rows: rows, cols: cols, src: src, bits: slices.Clone(src)}
	p.add(x, 2*int64(len(src)))
	p.mu.Lock()
	p.started++
	p.inFlight += 2 * int64(len(src))
	p.mostInFlight = max(p.mostInFlight, p.inFlight)
	p.mu.Unlock()
	return x, nil
}

// inFlight is one transfer PrefetchBF16 started.
type inFlight struct {
	p          *prefetching
	rows, cols int
	src, bits  []uint16
	done       bool
}

func (x *inFlight) Take() (ops.Tensor, error) {
	p := x.p
	if x.done {
		return nil, errors.New("Take of a transfer already ended")
	}
	x.done = true
	p.mu.Lock()
	p.taken++
	p.inFlight -= 2 * int64(len(x.src))
	fail := p.taken == p.failTake
	if !slices.Equal(x.src, x.bits) && p.changed == nil {
		p.changed = fmt.Errorf("the source of a %dx%d transfer changed before its Take", x.rows, x.cols)
	}
	p.mu.Unlock()
	defer p.drop(x)
	if fail {
		return nil, errors.New("injected failure of a prefetched transfer")
	}
	return p.FromHostBF16(x.rows, x.cols, x.bits)
}

func (x *inFlight) Drop() error {
	if x.done {
		return errors.New("Drop of a transfer already ended")
	}
	x.done = true
	x.p.mu.Lock()
	x.p.dropped++
	x.p.inFlight -= 2 * int64(len(x.src))
	x.p.mu.Unlock()
	x.p.drop(x)
	return nil
}

// TestStatePrefetch: with the state of a wave in host memory, a backend that splits transfers gets the
// next slice's state started before each slice runs (model/state_prefetch.go): the tables are the
// unsliced wave's, every transfer started is taken or dropped, none had its source changed under it,
// and the device peak, the bytes on their way included, stays within the plan, which counts them. A
// failed transfer fails the wave with its error and leaves nothing on its way.
func TestStatePrefetch(t *testing.T) {
	lens := []int{300, 41, 700, 5, 1000}
	total := 0
	for _, n := range lens {
		total += n
	}
	seqs := randomSequences(9, 3328, lens...)
	opts := Options{TopK: 3, Lens: []int{4}, Hidden: []int{2}, Router: true, AttnRes: true}
	want := runOne(t, openTiny(t, ops.BF16, EngineOptions{}), Request{Sequences: seqs, Options: opts})
	probe := openPreset(t, "tiny", 1, cpu.New(cpu.Options{}), EngineOptions{})
	act, state, hostState := probe.tokenBytes()
	// a token's downloads on their way out beside the next slice: its running sum and a banked block,
	// and in an expert-major layer its stash of expert inputs and shared outputs (all bfloat16)
	d := probe.Model.Dims
	stateOut, stashOut := int64(2*2*d.Hidden), int64(2*(d.Latent+d.Hidden))
	// slices of 300 and a quarter of the wave's state, with room for a slice's state on its way in and
	// out, and an expert-major layer's stash on its way out
	budget := quarterStateBudget(probe, act+state+hostState+stateOut+stashOut, total)
	for _, c := range []struct {
		name     string
		major    bool
		failTake int
	}{{"sliced", false, 0}, {"expert-major", true, 0}, {"a transfer fails", false, 7}} {
		t.Run(c.name, func(t *testing.T) {
			pb := &prefetching{counting: newCounting(ops.BF16), failTake: c.failTake}
			pb.scratch = probe.Model.ExpertScratchBytes
			e := openPreset(t, "tiny", 1, pb, EngineOptions{SliceTokens: 300, DeviceMemory: budget, NoExpertPooling: true})
			e.forceExpertMajor = c.major
			pb.reset()
			got, _, err := e.Run(context.Background(), []Request{{Sequences: seqs, Options: opts}})
			p := e.plan
			if pb.taken+pb.dropped != pb.started {
				t.Errorf("%d transfers started, %d taken, %d dropped: some left on their way", pb.started, pb.taken, pb.dropped)
			}
			if pb.changed != nil {
				t.Error(pb.changed)
			}
			if c.failTake > 0 {
				if err == nil || !containsAll(err.Error(), "injected failure of a prefetched transfer", "state of slice") {
					t.Fatalf("a failed transfer: err %v, want its error with the slice named", err)
				}
				if pb.dropped == 0 {
					t.Errorf("the wave failed with %d transfers started and none dropped", pb.started)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !p.HostState || p.Slices < 2 || p.ExpertMajor != c.major {
				t.Fatalf("plan %s: want the state in host memory, several slices, expert-major %v", p, c.major)
			}
			if pb.started == 0 || pb.dropped != 0 || pb.downloads == 0 {
				t.Errorf("%d transfers started, %d dropped, %d downloads queued: want some started, none dropped, some queued (%s)", pb.started, pb.dropped, pb.downloads, p)
			}
			// one slice's state on its way at most, which the plan counts: its peak less the state on the
			// device is the plain backend's plan's, for the same slices, plus a slice's state in bfloat16
			if share := int64(p.SliceTokens) * hostState; pb.mostInFlight > share {
				t.Errorf("%d bytes of state on their way at once, more than a slice's %d", pb.mostInFlight, share)
			}
			plain := openPreset(t, "tiny", 1, newCounting(ops.BF16), EngineOptions{SliceTokens: 300, DeviceMemory: budget, NoExpertPooling: true})
			plain.forceExpertMajor = c.major
			q, err := plain.PlanWave(lens)
			if err != nil {
				t.Fatal(err)
			}
			resident := func(w WavePlan) int64 { return int64(min((w.DeviceSlices+1)*w.SliceTokens, w.WaveTokens)) * state }
			extra := hostState + stateOut // a token's state in, its downloads out
			if !p.StashOnDevice && p.ExpertMajor {
				extra += stashOut
			}
			if q.SliceTokens == p.SliceTokens {
				if got, want := p.DevicePeak-resident(p), q.DevicePeak-resident(q)+int64(p.SliceTokens)*extra; got != want {
					t.Errorf("the plan's device peak less its resident state: %d, want the plain backend's plan's plus a slice's state on its way in and its downloads out, %d\n  %s\n  %s", got, want, p, q)
				}
			} else if p.SliceTokens > q.SliceTokens {
				t.Errorf("slices of %d with the state on its way counted, %d without (%s, %s)", p.SliceTokens, q.SliceTokens, p, q)
			}
			if limit := p.DevicePeak - p.WeightBytes; pb.peak > limit {
				t.Errorf("device peak of activations, carries and state on its way %d bytes, over the plan's %d (%s)", pb.peak, limit, p)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("results with the state prefetched differ from the unsliced wave (%s)", p)
			}
			t.Logf("%s; %d transfers started; counted peak %.2f MB of %.2f planned", p, pb.started, float64(pb.peak)/1e6, float64(p.DevicePeak-p.WeightBytes)/1e6)
		})
	}
}

// containsAll says whether s contains every one of subs.
func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}
