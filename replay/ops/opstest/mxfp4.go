package opstest

import (
	"math"
	"math/rand/v2"

	"github.com/potato-k3/potato-k3/replay/ops"
)

// The suite's own MXFP4 packing and decoding (K3_SPEC.md section 4), independent of package checkpoint:
// byte j of a row holds column 2j in its low nibble and column 2j+1 in its high nibble; code c means
// e2m1[c]; scale byte s multiplies a group of 32 columns by 2^(s-127).

var e2m1 = [16]float64{0, 0.5, 1, 1.5, 2, 3, 4, 6, math.Copysign(0, -1), -0.5, -1, -1.5, -2, -3, -4, -6}

// The public golden (K3_SPEC.md section 4): layer 1, expert 0, w1, row 0 of the real checkpoint has scale
// byte 121 (2^-6) on its first group and these first 16 codes and decoded values.
var (
	goldenScale = byte(121)
	goldenCodes = []byte{6, 1, 9, 11, 14, 12, 3, 2, 5, 8, 11, 10, 11, 9, 2, 10} // 4 .5 -.5 -1.5 -4 -2 1.5 1 3 -0 -1.5 -1 -1.5 -.5 1 -1
	goldenRow   = []float64{0.0625, 0.0078125, -0.0078125, -0.0234375, -0.0625, -0.03125, 0.0234375, 0.015625,
		0.046875, math.Copysign(0, -1), -0.0234375, -0.015625, -0.0234375, -0.0078125, 0.015625, -0.015625}
)

// mxfp4 is one MXFP4 matrix: its bytes and the values they stand for.
type mxfp4 struct {
	rows, cols     int
	packed, scales []byte
	values         []float64
}

// newMXFP4 packs codes (rows x cols, one code 0..15 each) with scale bytes (rows x cols/32).
func newMXFP4(rows, cols int, codes, scales []byte) mxfp4 {
	m := mxfp4{rows: rows, cols: cols, packed: make([]byte, rows*cols/2), scales: scales, values: make([]float64, rows*cols)}
	for i := 0; i < len(codes); i += 2 {
		m.packed[i/2] = codes[i] | codes[i+1]<<4
	}
	groups := cols / 32
	for r := range rows {
		for c := range cols {
			code := m.packed[(r*cols+c)/2] >> (4 * (c % 2)) & 15
			m.values[r*cols+c] = e2m1[code] * math.Ldexp(1, int(scales[r*groups+c/32])-127)
		}
	}
	return m
}

// randMXFP4 makes a random matrix with scale bytes in [lo, hi].
func randMXFP4(rng *rand.Rand, rows, cols int, lo, hi byte) mxfp4 {
	codes, scales := make([]byte, rows*cols), make([]byte, rows*cols/32)
	for i := range codes {
		codes[i] = byte(rng.IntN(16))
	}
	for i := range scales {
		scales[i] = lo + byte(rng.IntN(int(hi-lo)+1))
	}
	return newMXFP4(rows, cols, codes, scales)
}

// expert is a routed expert as the suite knows it: w1, w3 are ffn x latent, w2 latent x ffn.
type expert struct {
	id         int
	w1, w3, w2 mxfp4
}

func (s *suite) randExpert(id, latent, ffn int) expert {
	// scales 2^-5 .. 2^-3 keep W z and the outputs of order one for z of order one
	return expert{id: id, w1: randMXFP4(s.rng, ffn, latent, 122, 124), w3: randMXFP4(s.rng, ffn, latent, 122, 124),
		w2: randMXFP4(s.rng, latent, ffn, 121, 123)}
}

func (s *suite) upload(e expert) ops.Expert {
	s.Helper()
	x, err := s.b.UploadExpert(e.id, e.w2.rows, e.w1.rows, e.w1.packed, e.w1.scales, e.w3.packed, e.w3.scales, e.w2.packed, e.w2.scales)
	if err != nil {
		s.Fatalf("UploadExpert(%d): %v", e.id, err)
	}
	if x.ID() != e.id {
		s.Fatalf("UploadExpert(%d) returned an expert with ID %d", e.id, x.ID())
	}
	return x
}

// refExperts adds, for every row and every chosen expert among es, weight * rd(W2 rd(situ(rd(W1 z),
// rd(W3 z)))) to acc, in float64.
func refExperts(acc, z []float64, rows, latent int, ids []int32, weights []float32, k int, es []expert,
	beta, linBeta float64, rd func(float64) float64) []float64 {
	out := append([]float64(nil), acc...)
	for _, e := range es {
		ffn := e.w1.rows
		for r := range rows {
			w, chosen := 0.0, false
			for j := range k {
				if int(ids[r*k+j]) == e.id {
					w, chosen = float64(weights[r*k+j]), true
				}
			}
			if !chosen {
				continue
			}
			zr := z[r*latent : (r+1)*latent]
			a := refMatMul(zr, e.w1.values, 1, ffn, latent, rd)
			c := refMatMul(zr, e.w3.values, 1, ffn, latent, rd)
			h := refMatMul(refSiTU(a, c, beta, linBeta, rd), e.w2.values, 1, latent, ffn, rd)
			for d := range latent {
				out[r*latent+d] += w * h[d]
			}
		}
	}
	return out
}
