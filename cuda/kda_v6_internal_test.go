package cuda

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/potato-k3/potato-k3/replay/ops"
)

// kdaSplitVersions are KDA versions 6-8 (k_kda_prep4, then kda.cu's kda_split: each column over R
// threads, C columns a thread).
var kdaSplitVersions = []int{6, 7, 8}

// TestKDASplitLaunch: versions 6-8 launch kda_split for the head widths kda.cu instantiates, with R*d/C
// threads, and fall back to recurrence version 4 for the others; versions 5 and below never launch it.
// No GPU needed.
func TestKDASplitLaunch(t *testing.T) {
	for _, c := range []struct{ version, d, threads int }{
		{6, 128, 256}, {6, 64, 128}, {6, 32, 0}, {7, 128, 128}, {7, 64, 64}, {7, 32, 0},
		{8, 128, 128}, {8, 64, 64}, {8, 32, 0}, {5, 128, 0}, {4, 128, 0}, {3, 64, 0},
	} {
		threads, ok := kdaSplit(c.version, c.d)
		if ok != (c.threads > 0) || threads != c.threads {
			t.Errorf("version %d, width %d: %d threads (%v), want %d", c.version, c.d, threads, ok, c.threads)
		}
	}
}

// TestKDAVersion6: versions 6, 7 and 8 (k_kda_prep4, then k_kda6/7/8_rD: each column's sums split over 2
// or 4 threads and added in a fixed order) stay within kdaV4Tol of version 3 over TestKDAVersion4's
// layout (sequences of 1, 63, 64, 65 and 129 rows), head widths 32 (recurrence version 4's kernel), 64
// and 128, one and three heads, in both precisions (the knob forces them in FP32 precision, where the
// float32 difference shows unrounded); in BF16 precision at most 1% of the outputs may move (by one
// bfloat16 ulp); and every sequence's output is the same alone as inside the wave, bit for bit.
func TestKDAVersion6(t *testing.T) {
	lens := []int{1, 63, 64, 65, 129}
	starts := []int{0}
	for _, n := range lens {
		starts = append(starts, starts[len(starts)-1]+n)
	}
	l := ops.Layout{Starts: starts}
	rows := l.Tokens()
	for _, prec := range []ops.Precision{ops.BF16, ops.FP32} {
		b := testBackend(t, Options{Precision: prec})
		for _, d := range []int{32, 64, 128} {
			for _, heads := range []int{1, 3} {
				rng := rand.New(rand.NewPCG(uint64(d), uint64(heads)))
				in := newKDAInputs(t, b, rng, rows, heads, d)
				y3, err := kdaWith(b, 3, in.dev, heads, l)
				if err != nil {
					t.Fatalf("%v/d%d/heads%d: version 3: %v", prec, d, heads, err)
				}
				for _, v := range kdaSplitVersions {
					name := fmt.Sprintf("%v/d%d/heads%d/v%d", prec, d, heads, v)
					y, err := kdaWith(b, v, in.dev, heads, l)
					if err != nil {
						t.Fatalf("%s: %v", name, err)
					}
					df := diffKDA(y, y3, prec == ops.BF16)
					t.Logf("%s: version %d against 3: %v", name, v, df)
					if df.maxFrac > 1 {
						i := df.worst
						t.Errorf("%s: row %d col %d: version %d %g, version 3 %g: beyond the tolerance (%.3g |ref| + %.3g rms)",
							name, i/(heads*d), i%(heads*d), v, y[i], y3[i], df.tolRel, df.tolBase)
					}
					if prec == ops.BF16 && df.differ*100 > df.n {
						t.Errorf("%s: %d of %d values differ from version 3 (at most 1%% may)", name, df.differ, df.n)
					}
					checkKDAAlone(t, b, name, in, l, v, y)
				}
				in.free(b)
			}
		}
	}
}

// TestKDAVersion6Wave: in a wave of many blocks (7 sequences of 1 to 300 rows, 4 heads of 128: 28 blocks
// of each version's split kernel sharing SMs), every sequence of versions 6-8 is bit-identical alone and
// at its offset in the wave, in BF16 precision.
func TestKDAVersion6Wave(t *testing.T) {
	l := ops.Layout{Starts: []int{0, 300, 301, 338, 466, 595, 600, 811}}
	b := testBackend(t, Options{Precision: ops.BF16})
	const heads, d = 4, 128
	in := newKDAInputs(t, b, rand.New(rand.NewPCG(11, 12)), l.Tokens(), heads, d)
	defer in.free(b)
	for _, v := range kdaSplitVersions {
		y, err := kdaWith(b, v, in.dev, heads, l)
		if err != nil {
			t.Fatalf("version %d: %v", v, err)
		}
		checkKDAAlone(t, b, fmt.Sprintf("wave/v%d", v), in, l, v, y)
	}
}
