package opstest

import (
	"encoding/binary"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/potato-k3/potato-k3/replay/bf16"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// RunAll runs the whole suite on backends made by newBackend, once per precision, as subtests named
// "bf16/<test>" and "fp32/<test>". newBackend is called once per precision.
func RunAll(t *testing.T, newBackend func(ops.Precision) ops.Backend) {
	for _, p := range []ops.Precision{ops.BF16, ops.FP32} {
		t.Run(p.String(), func(t *testing.T) {
			b := newBackend(p)
			if b == nil {
				t.Fatal("newBackend returned nil")
			}
			if b.Precision() != p {
				t.Fatalf("backend %s made for %v reports precision %v", b.Name(), p, b.Precision())
			}
			for _, c := range allTests {
				t.Run(c.name, func(t *testing.T) {
					c.fn(newSuite(t, b, c.name))
				})
			}
		})
	}
}

// RunSlices runs only the slice checks (ops.Slicer) in both precisions: for a backend whose options
// change how its sliced ops work inside (a device backend's parts), without the whole suite again.
func RunSlices(t *testing.T, newBackend func(ops.Precision) ops.Backend) {
	for _, p := range []ops.Precision{ops.BF16, ops.FP32} {
		t.Run(p.String(), func(t *testing.T) {
			b := newBackend(p)
			for _, c := range sliceTests {
				t.Run(c.name, func(t *testing.T) { c.fn(newSuite(t, b, c.name)) })
			}
		})
	}
}

// test is one named check of the suite.
type test struct {
	name string
	fn   func(s *suite)
}

// allTests lists every check, grouped by file.
var allTests = concat(basicTests, hostTests, denseTests, attnTests, moeTests, logitTests, batchTests, sliceTests)

func concat(lists ...[]test) []test {
	var out []test
	for _, l := range lists {
		out = append(out, l...)
	}
	return out
}

// suite is what one check works with: the backend under test, its precision and a generator seeded from
// the check's name (so every run of a check sees the same inputs, whatever ran before).
type suite struct {
	*testing.T
	b   ops.Backend
	bf  bool // precision BF16: the references round at the contract's rounded points
	rng *rand.Rand
}

func newSuite(t *testing.T, b ops.Backend, name string) *suite {
	h := fnv.New64a()
	h.Write([]byte(name))
	return &suite{T: t, b: b, bf: b.Precision() == ops.BF16, rng: rand.New(rand.NewPCG(h.Sum64(), 0x6b33))}
}

// rd is the reference's rounding point: bfloat16 in BF16 precision, nothing in FP32.
func (s *suite) rd(x float64) float64 {
	if s.bf {
		return float64(bf16.Round(float32(x)))
	}
	return x
}

// eps is the relative tolerance of the precision; tol returns the usual tolerance for a reference ref.
func (s *suite) eps() float64 {
	if s.bf {
		return 1e-2
	}
	return 1e-6
}

func (s *suite) tol(ref []float64) tol {
	return tol{abs: s.eps() * rms(ref), rel: s.eps()}
}

// sumTol is the tolerance for outputs that are float32 sums of k terms in a fixed order: a plain ascending
// sum carries rounding errors of about 2^-24 |partial sum| per add, sqrt(k) of them adding up like a random
// walk, so tolAbs is the larger of eps and 4 sqrt(k) 2^-24, times the RMS of the reference. It only
// matters in FP32; in BF16 the output rounding dominates.
func (s *suite) sumTol(ref []float64, k int) tol {
	return tol{abs: max(s.eps(), 4*math.Sqrt(float64(k))*0x1p-24) * rms(ref), rel: s.eps()}
}

// magTol is the tolerance for an output whose error scales with the magnitude of the terms it sums (a
// mix of vectors with cancelling signs): tolAbs is f eps times the RMS of mag, the sum of the terms'
// absolute values, instead of the RMS of the result.
func (s *suite) magTol(mag []float64, f float64) tol {
	return tol{abs: f * s.eps() * rms(mag), rel: s.eps()}
}

// normals returns n values scale * N(0,1) as the precision stores activations (bfloat16 values in BF16,
// float32 in FP32), never all zero.
func (s *suite) normals(n int, scale float64) []float32 {
	out := make([]float32, n)
	for {
		nonzero := false
		for i := range out {
			out[i] = s.store(scale * s.rng.NormFloat64())
			nonzero = nonzero || out[i] != 0
		}
		if nonzero || n == 0 {
			return out
		}
	}
}

// uniforms returns n values uniform in [lo, hi), stored as normals does.
func (s *suite) uniforms(n int, lo, hi float64) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = s.store(lo + (hi-lo)*s.rng.Float64())
	}
	return out
}

// store rounds x as an activation of the precision is stored.
func (s *suite) store(x float64) float32 {
	if s.bf {
		return bf16.Round(float32(x))
	}
	return float32(x)
}

// act uploads host values as an activation (rows x cols) with FromHost.
func (s *suite) act(rows, cols int, v []float32) ops.Tensor {
	s.Helper()
	x, err := s.b.FromHost(rows, cols, v)
	if err != nil {
		s.Fatalf("FromHost(%d, %d): %v", rows, cols, err)
	}
	return x
}

// randAct makes a random activation and returns it with its values.
func (s *suite) randAct(rows, cols int, scale float64) (ops.Tensor, []float64) {
	s.Helper()
	v := s.normals(rows*cols, scale)
	return s.act(rows, cols, v), f64(v)
}

// weightBF16 uploads v, rounded to bfloat16, as a BF16 weight and returns the exact values it holds.
func (s *suite) weightBF16(rows, cols int, v []float32) (ops.Tensor, []float64) {
	s.Helper()
	raw := make([]byte, 2*len(v))
	bf16.Encode(raw, v)
	w, err := s.b.Upload(ops.WeightBF16, rows, cols, raw)
	if err != nil {
		s.Fatalf("Upload(bf16, %d, %d): %v", rows, cols, err)
	}
	exact := make([]float64, len(v))
	for i, x := range v {
		exact[i] = float64(bf16.Round(x))
	}
	return w, exact
}

// weightF32 uploads v as an F32 weight.
func (s *suite) weightF32(rows, cols int, v []float32) (ops.Tensor, []float64) {
	s.Helper()
	raw := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(x))
	}
	w, err := s.b.Upload(ops.WeightF32, rows, cols, raw)
	if err != nil {
		s.Fatalf("Upload(f32, %d, %d): %v", rows, cols, err)
	}
	return w, f64(v)
}

// randWeight makes a random BF16 weight with values scale * N(0,1).
func (s *suite) randWeight(rows, cols int, scale float64) (ops.Tensor, []float64) {
	s.Helper()
	v := make([]float32, rows*cols)
	for i := range v {
		v[i] = float32(scale * s.rng.NormFloat64())
	}
	return s.weightBF16(rows, cols, v)
}

// host reads a tensor back with ToHost and checks its shape and length.
func (s *suite) host(x ops.Tensor, rows, cols int) []float32 {
	s.Helper()
	if x == nil {
		s.Fatalf("nil tensor where a %dx%d result was expected", rows, cols)
	}
	if x.Rows() != rows || x.Cols() != cols {
		s.Fatalf("result is %dx%d, want %dx%d", x.Rows(), x.Cols(), rows, cols)
	}
	v, err := s.b.ToHost(x)
	if err != nil {
		s.Fatalf("ToHost: %v", err)
	}
	if len(v) != rows*cols {
		s.Fatalf("ToHost returned %d values for a %dx%d tensor", len(v), rows, cols)
	}
	return v
}

// free releases tensors at the end of a check.
func (s *suite) free(xs ...any) {
	for _, x := range xs {
		s.b.Free(x)
	}
}

// freeAll releases each of ts (free's form for a slice of tensors).
func (s *suite) freeAll(ts []ops.Tensor) {
	for _, t := range ts {
		s.b.Free(t)
	}
}

// must fails the check on err.
func (s *suite) must(err error, what string) {
	s.Helper()
	if err != nil {
		s.Fatalf("%s: %v", what, err)
	}
}

// layout returns the layout of sequences of the given lengths, in order.
func layout(lens ...int) ops.Layout {
	starts := []int{0}
	for _, n := range lens {
		starts = append(starts, starts[len(starts)-1]+n)
	}
	return ops.Layout{Starts: starts}
}

// tailRows are the row counts that hit the tails of 4-, 16-, 32- and 64-row blocking.
var tailRows = []int{1, 63, 64, 65, 129}

// unevenLens are the sequence lengths of a wave: a lone token, a short one, one chunk, one past a chunk.
var unevenLens = []int{1, 5, 64, 65}

func f64(v []float32) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}

func rms(v []float64) float64 {
	var s float64
	for _, x := range v {
		s += x * x
	}
	if len(v) == 0 {
		return 0
	}
	return math.Sqrt(s / float64(len(v)))
}
