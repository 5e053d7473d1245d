package replay

import (
	"testing"

	"github.com/potato-k3/potato-k3/replay/ops"
)

// TestEvenSlices: a wave is cut into as many slices as its largest slice allows, of one size, never
// larger than that largest slice, and never into more slices than needed.
func TestEvenSlices(t *testing.T) {
	for _, c := range []struct{ wave, most, want int }{
		{262144, 86016, 65536},   // 4 slices, not 3 x 86,016 + 4,096
		{262144, 76800, 65536},   // 4 slices, not 3 x 76,800 + 31,744
		{262144, 262144, 262144}, // one slice
		{262144, 300000, 300000}, // room to spare: the caller's min with the wave
		{1048576, 16384, 16384},  // an exact fit
		{100000, 40960, 33792},   // 3 slices of 33,334 rounded up to 1,024
		{2046, 700, 682},         // small slices are not rounded
		{2046, 1, 1},
		{7, 3, 3},
	} {
		got := evenSlices(c.wave, c.most)
		if got != c.want {
			t.Errorf("evenSlices(%d, %d) = %d, want %d", c.wave, c.most, got, c.want)
		}
		if c.most < c.wave {
			n := (c.wave + c.most - 1) / c.most
			if got > c.most || (c.wave+got-1)/got != n {
				t.Errorf("evenSlices(%d, %d) = %d: %d slices, want %d of at most %d", c.wave, c.most, got, (c.wave+got-1)/got, n, c.most)
			}
		}
	}
}

// TestPlanEvenSlices: where the state stays on the device and the layers run in slices, the plan's slices
// are of about one size, with no short last slice (the results do not depend on the slice size:
// TestSliceInvariance).
func TestPlanEvenSlices(t *testing.T) {
	const seqs, seqLen = 18, 500 // 9,000 tokens
	lens := make([]int, seqs)
	for i := range lens {
		lens[i] = seqLen
	}
	total := seqs * seqLen
	probe := openTiny(t, ops.BF16, EngineOptions{})
	act, state, _ := probe.tokenBytes()
	// the state of the whole wave and the activations of half of it: the largest slice 4,096 tokens, three
	// slices, the last of 808 tokens unless they are evened out
	budget := probe.weightPeak(true) + probe.carryBytes(seqLen, true) + int64(total)*state + int64(total)*act/2
	e := openTiny(t, ops.BF16, EngineOptions{DeviceMemory: budget})
	p, err := e.planWave(lens)
	if err != nil {
		t.Fatal(err)
	}
	if p.Waves != 1 || p.HostState || p.Slices != 3 {
		t.Fatalf("plan %s: want one read, the state on the device and three slices", p)
	}
	if last := p.WaveTokens - (p.Slices-1)*p.SliceTokens; last <= 0 || last < p.SliceTokens/2 {
		t.Errorf("plan %s: slices of %d with a last one of %d", p, p.SliceTokens, last)
	}
}

// TestPlanWholeWaveOneSlice: a wave whose activations and state fit the device at once runs as one slice
// whatever its size; rounding the slice down to a multiple of 1,024 once cut a wave of 3,102 tokens into
// two slices of 2,048 (and, spread over two devices, shares of about 1,550 into starved slices of 776 that
// sent the plan to unsliced layers with experts in chunks).
func TestPlanWholeWaveOneSlice(t *testing.T) {
	e := openTiny(t, ops.BF16, EngineOptions{DeviceMemory: 1 << 34})
	for _, lens := range [][]int{{3102}, {1552}, {1025}, {456, 300, 217, 129, 500, 400, 600, 500}} {
		p, err := e.planWave(lens)
		if err != nil {
			t.Fatal(err)
		}
		if p.Slices != 1 || p.SliceTokens != p.WaveTokens || p.Note != "" {
			t.Errorf("sequences %v: plan %s, want the wave as one slice", lens, p)
		}
	}
}
