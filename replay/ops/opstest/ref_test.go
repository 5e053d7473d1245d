package opstest

import (
	"math"
	"math/rand/v2"
	"testing"
)

// The references check themselves here, without a backend: an error in a reference would otherwise pass
// or fail every backend alike.

// TestGoldenCodes: the suite's decoder turns the golden codes and scale into K3_SPEC.md's golden values,
// signed zero included.
func TestGoldenCodes(t *testing.T) {
	codes := make([]byte, 32)
	copy(codes, goldenCodes)
	m := newMXFP4(1, 32, codes, []byte{goldenScale})
	for j, want := range goldenRow {
		got := m.values[j]
		if got != want || math.Signbit(got) != math.Signbit(want) {
			t.Errorf("column %d: decoded %g, want %g", j, got, want)
		}
	}
	if m.packed[0] != 0x16 { // column 0 (code 6) in the low nibble, column 1 (code 1) in the high one
		t.Errorf("first packed byte %#02x, want 0x16", m.packed[0])
	}
}

// TestKDAForms: the chunked form equals the step recurrence over several chunks, uneven sequences and a
// strong decay (the lower bound -5 at its extreme).
func TestKDAForms(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	normals := func(n int, scale float64) []float64 {
		v := make([]float64, n)
		for i := range v {
			v[i] = scale * rng.NormFloat64()
		}
		return v
	}
	const heads, d = 2, 8
	for _, lens := range [][]int{{200}, {1, 64, 65, 130}} {
		l := layout(lens...)
		rows, ch := l.Tokens(), heads*d
		in := kdaIn{q: normals(rows*ch, 1), k: normals(rows*ch, 1), v: normals(rows*ch, 1), graw: normals(rows*ch, 3),
			braw: normals(rows*heads, 2), aLog: normals(heads, 1), dtBias: normals(ch, 1), heads: heads, ch: ch,
			lower: -5, starts: l.Starts}
		step, chunked := refKDAStep(in), refKDAChunked(in)
		var worst float64
		for i := range step {
			worst = max(worst, math.Abs(step[i]-chunked[i]))
		}
		if worst > 1e-12*max(rms(step), 1e-30) {
			t.Errorf("sequences %v: chunked and step forms differ by up to %.3g (rms %.3g)", lens, worst, rms(step))
		}
		if rms(step) == 0 {
			t.Errorf("sequences %v: the recurrence produced only zeros", lens)
		}
	}
}

// TestMLAOneToken: with one token the softmax has one entry, so the output is that token's value.
func TestMLAOneToken(t *testing.T) {
	in := mlaIn{q: []float64{1, 2, 3}, kv: []float64{4, 5, 6}, ks: []float64{7}, heads: 1, nope: 2, shared: 1, vdim: 1,
		starts: []int{0, 1}}
	if got := refMLA(in, func(x float64) float64 { return x }); len(got) != 1 || got[0] != 6 {
		t.Errorf("refMLA = %v, want [6]", got)
	}
}

// TestMeasure: the tolerance report finds the worst element relative to its own tolerance.
func TestMeasure(t *testing.T) {
	c := measure([]float32{1, 2.1, 100.5}, []float64{1, 2, 100}, tol{abs: 0.01, rel: 0.01})
	if c.bad != 1 || c.worst != 1 || math.Abs(c.maxAbs-0.5) > 1e-6 {
		t.Errorf("measure = %+v, want one bad value, the worst at 1, max abs 0.5", c)
	}
	if c := measure([]float32{float32(math.NaN())}, []float64{1}, tol{abs: 1}); c.bad != 1 {
		t.Errorf("a NaN against 1 must fail: %+v", c)
	}
}
