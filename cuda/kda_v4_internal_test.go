package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/potato-k3/potato-k3/replay/ops"
)

// kdaDiff is how far version 4's outputs are from version 3's.
type kdaDiff struct {
	n, differ       int     // values compared, values whose bits differ
	rms             float64 // RMS of the reference outputs
	maxAbs, maxRel  float64 // max |got - ref|, max |got - ref| / (|ref| + rms)
	maxFrac         float64 // max |got - ref| / tolerance of the value
	worst           int     // index of the value at maxFrac
	tolRel, tolBase float64 // the tolerance: tolRel |ref| + tolBase rms
}

// kdaV4Tol is version 4's tolerance against version 3 for a value ref in an output of RMS rms: float32
// rounding level in FP32 precision (1e-5 (|ref| + rms): fused sums over 128 terms of a contractive
// recurrence move a value by about 1e-6 of that), and in BF16 precision one bfloat16 ulp (at most 2^-7
// |ref|) for the values sitting on a rounding boundary, plus the float32 part. In BF16 precision two
// different outputs are at least one ulp apart, so any moved value uses 50-100% of the tolerance (100%
// for a step up from a power of two) and two ulps fail: the check is "at most one bfloat16 ulp".
func kdaV4Tol(bf bool) (rel, base float64) {
	if bf {
		return 1.0 / 128, 1e-5
	}
	return 1e-5, 1e-5
}

// diffKDA compares got with ref under kdaV4Tol.
func diffKDA(got, ref []float32, bf bool) kdaDiff {
	d := kdaDiff{n: len(ref), worst: -1}
	d.tolRel, d.tolBase = kdaV4Tol(bf)
	var ss float64
	for _, x := range ref {
		ss += float64(x) * float64(x)
	}
	d.rms = math.Sqrt(ss / float64(max(len(ref), 1)))
	for i := range ref {
		g, r := float64(got[i]), float64(ref[i])
		if math.Float32bits(got[i]) != math.Float32bits(ref[i]) {
			d.differ++
		}
		e := math.Abs(g - r)
		if math.IsNaN(e) {
			e = math.Inf(1)
		}
		d.maxAbs = max(d.maxAbs, e)
		d.maxRel = max(d.maxRel, e/(math.Abs(r)+d.rms))
		if f := e / (d.tolRel*math.Abs(r) + d.tolBase*d.rms); f > d.maxFrac || d.worst < 0 {
			d.maxFrac, d.worst = f, i
		}
	}
	return d
}

func (d kdaDiff) String() string {
	return fmt.Sprintf("%d of %d values differ (%.3f%%), max abs %.3g, max rel %.3g (of |ref| + rms %.3g), %.1f%% of the tolerance",
		d.differ, d.n, 100*float64(d.differ)/float64(max(d.n, 1)), d.maxAbs, d.maxRel, d.rms, 100*d.maxFrac)
}

// TestKDADefaultVersion: KDA launches version 7 (prep4, then kda_split with two threads a column and two
// columns a thread) in BF16 precision and version 3 (the CPU backend's bits) in FP32 precision; the test
// knob overrides both. No GPU needed.
func TestKDADefaultVersion(t *testing.T) {
	for _, c := range []struct{ bf, knob, want int }{{1, 0, 7}, {0, 0, 3}, {1, 3, 3}, {1, 4, 4}, {0, 4, 4}, {0, 5, 5}, {1, 2, 2},
		{1, 6, 6}, {1, 7, 7}, {1, 8, 8}, {0, 8, 8}} {
		b := &Backend{bf: int32(c.bf), kdaVer: c.knob}
		if got := b.kdaVersion(); got != c.want {
			t.Errorf("bf %d, knob %d: version %d, want %d", c.bf, c.knob, got, c.want)
		}
	}
}

// TestKDAVersion4: version 4 (k_kda4_rD, fused multiply-adds) stays within kdaV4Tol of version 3 over
// sequences with tails (1, 63, 64, 65, 129 rows in one layout), head widths 32, 64 and 128, one and three
// heads, in both precisions (the knob forces version 4 in FP32 precision, where the float32 difference
// shows unrounded); and every sequence's version 4 output is the same alone as inside the wave, bit for
// bit.
func TestKDAVersion4(t *testing.T) {
	l := kdaTailLayout()
	rows := l.Tokens()
	for _, prec := range []ops.Precision{ops.BF16, ops.FP32} {
		b := testBackend(t, Options{Precision: prec})
		for _, d := range []int{32, 64, 128} {
			for _, heads := range []int{1, 3} {
				name := fmt.Sprintf("%v/d%d/heads%d", prec, d, heads)
				rng := rand.New(rand.NewPCG(uint64(d), uint64(heads)))
				in := newKDAInputs(t, b, rng, rows, heads, d)
				y3, err := kdaWith(b, 3, in.dev, heads, l)
				if err != nil {
					t.Fatalf("%s: version 3: %v", name, err)
				}
				y4, err := kdaWith(b, 4, in.dev, heads, l)
				if err != nil {
					t.Fatalf("%s: version 4: %v", name, err)
				}
				checkKDANear3(t, name, 4, y4, y3, heads*d, prec == ops.BF16)
				checkKDAAlone(t, b, name, in, l, 4, y4)
				in.free(b)
			}
		}
	}
}

// checkKDANear3 fails the test unless got (version) is within kdaV4Tol of y3 (version 3's output, rows of
// width cols) and, in BF16 precision, at most 1% of the values differ (a bfloat16 flip needs a value on a
// rounding boundary); it logs the comparison.
func checkKDANear3(t *testing.T, name string, version int, got, y3 []float32, cols int, bf bool) {
	t.Helper()
	df := diffKDA(got, y3, bf)
	t.Logf("%s: version %d against 3: %v", name, version, df)
	if df.maxFrac > 1 {
		i := df.worst
		t.Errorf("%s: row %d col %d: version %d %g, version 3 %g: beyond the tolerance (%.3g |ref| + %.3g rms)",
			name, i/cols, i%cols, version, got[i], y3[i], df.tolRel, df.tolBase)
	}
	if bf && df.differ*100 > df.n {
		t.Errorf("%s: %d of %d values differ from version 3 (at most 1%% may)", name, df.differ, df.n)
	}
}

// checkKDAAlone runs each sequence of l alone with version and compares it bit for bit with its rows of
// wave, the output of the whole layout.
func checkKDAAlone(t *testing.T, b *Backend, name string, in *kdaInputs, l ops.Layout, version int, wave []float32) {
	t.Helper()
	ch := in.heads * in.d
	for s := range l.Sequences() {
		r0, r1 := l.Starts[s], l.Starts[s+1]
		x := in.rowsOf(t, b, r0, r1)
		ya, err := kdaWith(b, version, x, in.heads, ops.Layout{Starts: []int{0, r1 - r0}})
		for i := range 5 {
			b.Free(x[i])
		}
		if err != nil {
			t.Fatalf("%s: sequence %d alone: %v", name, s, err)
		}
		if i := firstDiff(ya, wave[r0*ch:r1*ch]); i >= 0 {
			t.Errorf("%s: version %d, sequence %d (rows %d..%d): alone and in the wave differ at value %d", name, version, s, r0, r1, i)
		}
	}
}
