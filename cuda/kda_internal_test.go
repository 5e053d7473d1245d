package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/potato-k3/potato-k3/replay/cpu"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// The KDA kernels against the CPU backend (the plain loop of Backend.KDA's doc comment), in both
// precisions, over sequences with tails and every head width class kda.cu has a kernel for.

// kdaInputs are KDA's seven inputs for one layout, on the device, with their host values.
type kdaInputs struct {
	heads, d int
	host     [7][]float32 // q, k, v, graw (rows x heads*d), braw (rows x heads), aLog (1 x heads), dtBias (1 x heads*d)
	dev      [7]ops.Tensor
}

// kdaShapes are the shapes of KDA's inputs for rows rows of heads heads of width d.
func kdaShapes(rows, heads, d int) [7][2]int {
	ch := heads * d
	return [7][2]int{{rows, ch}, {rows, ch}, {rows, ch}, {rows, ch}, {rows, heads}, {1, heads}, {1, ch}}
}

// newKDAInputs makes random inputs for rows x heads heads of width d.
func newKDAInputs(t *testing.T, b *Backend, rng *rand.Rand, rows, heads, d int) *kdaInputs {
	t.Helper()
	in := &kdaInputs{heads: heads, d: d}
	scales := [7]float64{1, 1, 1, 1, 1.5, 0.5, 0.5}
	for i, sh := range kdaShapes(rows, heads, d) {
		v := make([]float32, sh[0]*sh[1])
		for j := range v {
			v[j] = float32(scales[i] * rng.NormFloat64())
		}
		in.host[i] = v
		x, err := b.FromHost(sh[0], sh[1], v)
		if err != nil {
			t.Fatal(err)
		}
		in.dev[i] = x
	}
	return in
}

// rowsOf returns the inputs of rows [r0, r1) as new device tensors (the per-row ones sliced, the
// weights shared).
func (in *kdaInputs) rowsOf(t *testing.T, b *Backend, r0, r1 int) [7]ops.Tensor {
	t.Helper()
	out := in.dev
	rows := len(in.host[4]) / in.heads
	for i := range 5 {
		cols := len(in.host[i]) / rows
		x, err := b.FromHost(r1-r0, cols, in.host[i][r0*cols:r1*cols])
		if err != nil {
			t.Fatal(err)
		}
		out[i] = x
	}
	return out
}

func (in *kdaInputs) free(b *Backend) {
	for _, x := range in.dev {
		b.Free(x)
	}
}

// kdaOn runs the KDA op of backend b (the CUDA backend or the CPU one) on inputs x and returns its output.
func kdaOn(b ops.Backend, x [7]ops.Tensor, heads int, l ops.Layout) ([]float32, error) {
	y, err := b.KDA(x[0], x[1], x[2], x[3], x[4], x[5], x[6], heads, -5, l)
	if err != nil {
		return nil, err
	}
	defer b.Free(y)
	return b.ToHost(y)
}

// kdaCPU runs the CPU backend's KDA in precision prec on in's host values.
func kdaCPU(t *testing.T, prec ops.Precision, in *kdaInputs, l ops.Layout) []float32 {
	t.Helper()
	c := cpu.New(cpu.Options{Precision: prec})
	var x [7]ops.Tensor
	for i, sh := range kdaShapes(l.Tokens(), in.heads, in.d) {
		var err error
		if x[i], err = c.FromHost(sh[0], sh[1], in.host[i]); err != nil {
			t.Fatal(err)
		}
	}
	y, err := kdaOn(c, x, in.heads, l)
	if err != nil {
		t.Fatalf("cpu KDA: %v", err)
	}
	return y
}

// firstDiff returns the index of the first value whose bits differ, or -1.
func firstDiff(a, b []float32) int {
	if len(a) != len(b) {
		return 0
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return i
		}
	}
	return -1
}

// kdaTailLayout is the KDA tests' layout: sequences of 1, 63, 64, 65 and 129 rows, every tail of the
// kernels' row chunks, in one wave.
func kdaTailLayout() ops.Layout {
	starts := []int{0}
	for _, n := range []int{1, 63, 64, 65, 129} {
		starts = append(starts, starts[len(starts)-1]+n)
	}
	return ops.Layout{Starts: starts}
}

// kdaDiff is how far the backend's outputs are from the reference's.
type kdaDiff struct {
	n, differ       int     // values compared, values whose bits differ
	rms             float64 // RMS of the reference outputs
	maxAbs, maxRel  float64 // max |got - ref|, max |got - ref| / (|ref| + rms)
	maxFrac         float64 // max |got - ref| / tolerance of the value
	worst           int     // index of the value at maxFrac
	tolRel, tolBase float64 // the tolerance: tolRel |ref| + tolBase rms
}

// kdaTol is the KDA kernels' tolerance against the CPU backend for a value ref in an output of RMS rms:
// float32 rounding level in FP32 precision (1e-5 (|ref| + rms): the exact kernels give the CPU bits but
// for rare double-precision libm differences in exp and sigmoid), and in BF16 precision one bfloat16 ulp
// (at most 2^-7 |ref|) for the values sitting on a rounding boundary, plus the float32 part (the fused
// sums over 128 terms of a contractive recurrence move a value by about 1e-6 of |ref| + rms). In BF16
// precision two different outputs are at least one ulp apart, so any moved value uses 50-100% of the
// tolerance and two ulps fail: the check is "at most one bfloat16 ulp".
func kdaTol(bf bool) (rel, base float64) {
	if bf {
		return 1.0 / 128, 1e-5
	}
	return 1e-5, 1e-5
}

// diffKDA compares got with ref under kdaTol.
func diffKDA(got, ref []float32, bf bool) kdaDiff {
	d := kdaDiff{n: len(ref), worst: -1}
	d.tolRel, d.tolBase = kdaTol(bf)
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

// checkKDANear fails the test unless got is within kdaTol of ref (rows of width cols) and at most 1% of
// the values differ in BF16 precision (a bfloat16 flip needs a value on a rounding boundary), or 0.1% in
// FP32 (libm differences); it logs the comparison.
func checkKDANear(t *testing.T, name string, got, ref []float32, cols int, bf bool) {
	t.Helper()
	df := diffKDA(got, ref, bf)
	t.Logf("%s: against the CPU backend: %v", name, df)
	if df.maxFrac > 1 {
		i := df.worst
		t.Errorf("%s: row %d col %d: cuda %g, cpu %g: beyond the tolerance (%.3g |ref| + %.3g rms)",
			name, i/cols, i%cols, got[i], ref[i], df.tolRel, df.tolBase)
	}
	limit := df.n / 1000
	if bf {
		limit = df.n / 100
	}
	if df.differ > limit {
		t.Errorf("%s: %d of %d values differ from the CPU backend (at most %d may)", name, df.differ, df.n, limit)
	}
}

// checkKDAAlone runs each sequence of l alone and compares it bit for bit with its rows of wave, the
// output of the whole layout.
func checkKDAAlone(t *testing.T, b *Backend, name string, in *kdaInputs, l ops.Layout, wave []float32) {
	t.Helper()
	ch := in.heads * in.d
	for s := range l.Sequences() {
		r0, r1 := l.Starts[s], l.Starts[s+1]
		x := in.rowsOf(t, b, r0, r1)
		ya, err := kdaOn(b, x, in.heads, ops.Layout{Starts: []int{0, r1 - r0}})
		for i := range 5 {
			b.Free(x[i])
		}
		if err != nil {
			t.Fatalf("%s: sequence %d alone: %v", name, s, err)
		}
		if i := firstDiff(ya, wave[r0*ch:r1*ch]); i >= 0 {
			t.Errorf("%s: sequence %d (rows %d..%d): alone and in the wave differ at value %d", name, s, r0, r1, i)
		}
	}
}

// TestKDARecurrenceKernel: the recurrence kernel by precision and head width. No GPU needed.
func TestKDARecurrenceKernel(t *testing.T) {
	for _, c := range []struct {
		bf    bool
		d     int
		want  string
		shmem int
	}{
		{true, 128, "k_kda_fast_r128", 0}, {true, 64, "k_kda_fast_r64", 0}, {true, 32, "k_kda_exact_r32", 0},
		{true, 48, "k_kda_exact", 4 * (48*48 + 3*48)}, {false, 128, "k_kda_exact_r128", 0}, {false, 64, "k_kda_exact_r64", 0},
		{false, 32, "k_kda_exact_r32", 0}, {false, 16, "k_kda_exact", 4 * (16*16 + 3*16)},
	} {
		name, shmem := kdaRecurrenceKernel(c.bf, c.d)
		if name != c.want || shmem != c.shmem {
			t.Errorf("bf %v, width %d: %s with %d bytes of shared memory, want %s with %d", c.bf, c.d, name, shmem, c.want, c.shmem)
		}
	}
}

// TestKDAAgainstCPU: KDA against the CPU backend over sequences with tails (1, 63, 64, 65, 129 rows in
// one layout), head widths 128 and 64 (BF16: the chunked k_kda_chunk_rD on the tensor cores; FP32:
// k_kda_exact_rD), 32 (k_kda_exact_r32) and 48 (k_kda_exact),
// one and three heads, in both precisions: within kdaTol (FP32: the CPU bits but for rare libm
// differences; BF16: at most one bfloat16 ulp on at most 1% of the values); and every sequence's output
// is the same alone as inside the wave, bit for bit.
func TestKDAAgainstCPU(t *testing.T) {
	l := kdaTailLayout()
	rows := l.Tokens()
	for _, prec := range []ops.Precision{ops.BF16, ops.FP32} {
		b := testBackend(t, Options{Precision: prec})
		for _, d := range []int{128, 64, 32, 48} {
			for _, heads := range []int{1, 3} {
				name := fmt.Sprintf("%v/d%d/heads%d", prec, d, heads)
				rng := rand.New(rand.NewPCG(uint64(d), uint64(heads)))
				in := newKDAInputs(t, b, rng, rows, heads, d)
				y, err := kdaOn(b, in.dev, heads, l)
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				checkKDANear(t, name, y, kdaCPU(t, prec, in, l), heads*d, prec == ops.BF16)
				checkKDAAlone(t, b, name, in, l, y)
				in.free(b)
			}
		}
	}
}

// TestKDAWave: in a wave of many blocks (7 sequences of 1 to 300 rows, 4 heads of 128: 28 blocks of the
// recurrence sharing SMs), every sequence is bit-identical alone and at its offset in the wave, in both
// precisions.
func TestKDAWave(t *testing.T) {
	l := ops.Layout{Starts: []int{0, 300, 301, 338, 466, 595, 600, 811}}
	for _, prec := range []ops.Precision{ops.BF16, ops.FP32} {
		b := testBackend(t, Options{Precision: prec})
		const heads, d = 4, 128
		in := newKDAInputs(t, b, rand.New(rand.NewPCG(11, 12)), l.Tokens(), heads, d)
		y, err := kdaOn(b, in.dev, heads, l)
		if err != nil {
			t.Fatalf("%v: %v", prec, err)
		}
		checkKDAAlone(t, b, fmt.Sprintf("wave/%v", prec), in, l, y)
		in.free(b)
	}
}

// ulpDist is the distance of two float32 values in units in the last place (the difference of their
// bits on one ordered line), or MaxInt for a NaN.
func ulpDist(a, b float32) int {
	if a != a || b != b {
		return math.MaxInt
	}
	ord := func(x float32) int64 {
		u := int64(math.Float32bits(x))
		if u&(1<<31) != 0 {
			return -(u &^ (1 << 31))
		}
		return u
	}
	d := ord(a) - ord(b)
	if d < 0 {
		d = -d
	}
	return int(d)
}

// kdaPrepOut runs the prep (fast: k_kda_prep_fast, else k_kda_prep_exact) on in's rows and returns qn,
// kn, dec and beta.
func kdaPrepOut(t *testing.T, b *Backend, name string, in *kdaInputs, rows int, fast bool, lower float32) [4][]float32 {
	t.Helper()
	heads, d := in.heads, in.d
	n := rows * heads * d
	sizes := []int{n, n, n, rows * heads}
	var got [4][]float32
	err := b.run("prep", func(c *opCtx) error {
		ts := make([]*Tensor, 7)
		for i, x := range in.dev {
			ts[i] = x.(*Tensor)
		}
		ptrs, err := c.f32All(ts)
		if err != nil {
			return err
		}
		var bufs [4]uint64
		for i, sz := range sizes {
			if bufs[i], err = c.temp(4 * sz); err != nil {
				return err
			}
		}
		if err := c.kdaPrep(fast, bufs[0], bufs[1], bufs[2], bufs[3], ptrs, rows, heads, d, lower, float32(1/math.Sqrt(float64(d)))); err != nil {
			return err
		}
		for i, sz := range sizes {
			got[i] = make([]float32, sz)
			if err := download(b, got[i], bufs[i]); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("%s: prep (fast %v): %v", name, fast, err)
	}
	return got
}

// k_kda_prep_fast's tolerances against k_kda_prep_exact (double precision rounded once), in float32 ulps:
// beta = sigmoid_ff (expf's 2 ulps, an add and a reciprocal rounded: at most 4); dec = expf(y) with
// y = lower * gate, where gate carries sigmoid_ff's error (up to 4 ulps) into y and exp multiplies a
// relative error of y by |y| = |ln dec|: at most 4 + 5 |ln dec| ulps.
const (
	prepFastBetaULP   = 4
	prepFastDecULP    = 4
	prepFastDecLogULP = 5
)

// TestKDAPrepFast: k_kda_prep_fast gives k_kda_prep_exact's qn and kn bit for bit and dec and beta
// within a few float32 ulps (prepFastBetaULP, prepFastDecULP + prepFastDecLogULP |ln dec|), over
// sequences with tails (1, 63, 64, 65, 129 rows), head widths 32, 64, 128 and 48, one and three heads,
// two decay bounds (lower -5 as K3, and -1); it logs the largest and mean ulp distances.
func TestKDAPrepFast(t *testing.T) {
	l := kdaTailLayout()
	rows := l.Tokens()
	b := testBackend(t, Options{Precision: ops.BF16})
	for _, d := range []int{32, 64, 128, 48} {
		for _, heads := range []int{1, 3} {
			rng := rand.New(rand.NewPCG(uint64(d)+7, uint64(heads)))
			in := newKDAInputs(t, b, rng, rows, heads, d)
			for _, lower := range []float32{-5, -1} {
				checkPrepFast(t, b, fmt.Sprintf("d%d/heads%d/lower%g", d, heads, lower), in, rows, lower)
			}
			in.free(b)
		}
	}
}

// checkPrepFast compares the fast prep's outputs with the exact prep's under the tolerances above and
// logs the distances.
func checkPrepFast(t *testing.T, b *Backend, name string, in *kdaInputs, rows int, lower float32) {
	t.Helper()
	pe := kdaPrepOut(t, b, name, in, rows, false, lower)
	pf := kdaPrepOut(t, b, name, in, rows, true, lower)
	for i, what := range []string{"qn", "kn"} {
		if j := firstDiff(pe[i], pf[i]); j >= 0 {
			t.Errorf("%s: prep %s value %d: exact %g, fast %g", name, what, j, pe[i][j], pf[i][j])
		}
	}
	var decMax, decDiff, betaMax, betaDiff int
	var decSum, betaSum, decPerLog float64
	for j, r := range pe[2] {
		u := ulpDist(pf[2][j], r)
		lg := math.Abs(math.Log(float64(r)))
		decMax, decSum = max(decMax, u), decSum+float64(u)
		if u > 0 {
			decDiff++
			decPerLog = max(decPerLog, float64(u)/(1+lg))
		}
		if float64(u) > prepFastDecULP+prepFastDecLogULP*lg {
			t.Errorf("%s: dec value %d: exact %g, fast %g: %d ulps apart (allowed %.1f)", name, j, r, pf[2][j], u, prepFastDecULP+prepFastDecLogULP*lg)
		}
	}
	for j, r := range pe[3] {
		u := ulpDist(pf[3][j], r)
		betaMax, betaSum = max(betaMax, u), betaSum+float64(u)
		if u > 0 {
			betaDiff++
		}
		if u > prepFastBetaULP {
			t.Errorf("%s: beta value %d: exact %g, fast %g: %d ulps apart", name, j, r, pf[3][j], u)
		}
	}
	nd, nb := len(pe[2]), len(pe[3])
	t.Logf("%s: fast prep against exact: qn, kn equal; dec %d of %d differ, max %d ulps, mean %.3f, max ulps/(1+|ln dec|) %.2f; beta %d of %d differ, max %d ulps, mean %.3f",
		name, decDiff, nd, decMax, decSum/float64(max(nd, 1)), decPerLog, betaDiff, nb, betaMax, betaSum/float64(max(nb, 1)))
}
