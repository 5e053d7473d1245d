package synth

import (
	"fmt"
	"math"
	"strings"
	"sync"

	"github.com/potato-k3/potato-k3/replay/checkpoint"
)

// Routed experts are stored as MXFP4 (K3_SPEC.md section 4): per row, 4-bit E2M1 codes two to a byte and
// one E8M0 scale byte per 32 columns. Quantizing Gaussian floats would cost a few nanoseconds a value; a
// K3 MoE layer holds 31 billion of them. Instead the codes are drawn directly from the distribution that
// quantizing N(0, s^2) produces, by table lookup (four codes per 64-bit draw), with s chosen so that the
// decoded weights have exactly the intended standard deviation. Each group's scale is 2^e or, for a quarter
// of the groups, 2^(e+1) with codes half as wide: the scales vary across groups as a real quantizer's do,
// the decoded statistics do not. e is chosen so that no scale is near 255 (NaN).

// e2m1Mag are the magnitudes of E2M1 codes 0..7.
var e2m1Mag = [8]float64{0, 0.5, 1, 1.5, 2, 3, 4, 6}

// coarseGroupsPerMille is the share of groups (in 1/1000) stored with the doubled scale.
const coarseGroupsPerMille = 250

// codeTable maps 16 random bits to a signed E2M1 code (0..15) with the probabilities of quantized
// N(0, s^2), s chosen so that the codes have standard deviation std (in code units).
type codeTable [1 << 16]uint8

// newCodeTable builds the table for a target standard deviation in code units (0.3 .. 3).
func newCodeTable(std float64) *codeTable {
	// Bisection on s: the std of round-to-nearest(N(0, s^2)) clipped at 6 grows with s.
	lo, hi := 0.01, 8.0
	for range 60 {
		mid := (lo + hi) / 2
		if quantizedStd(mid) < std {
			lo = mid
		} else {
			hi = mid
		}
	}
	p := magnitudeProbs((lo + hi) / 2)
	var t codeTable
	// Half of the table is negative (codes 8..15, 8 being -0), half positive: the sign is one bit.
	half := len(t) / 2
	i := 0
	var cum float64
	for c := range 8 {
		cum += p[c]
		end := int(math.Round(cum * float64(half)))
		if c == 7 {
			end = half
		}
		for ; i < end; i++ {
			t[i] = uint8(c)
			t[half+i] = uint8(c) | 8
		}
	}
	return &t
}

// magnitudeProbs returns P(|round(N(0, s^2))| = m) for the eight E2M1 magnitudes: the probability mass
// between the midpoints around each, the last one taking the tail.
func magnitudeProbs(s float64) [8]float64 {
	var p [8]float64
	prev := 0.0 // P(|x| < lower midpoint)
	for m := range 8 {
		upper := 1.0
		if m < 7 {
			mid := (e2m1Mag[m] + e2m1Mag[m+1]) / 2
			upper = math.Erf(mid / (s * math.Sqrt2))
		}
		p[m] = upper - prev
		prev = upper
	}
	return p
}

// quantizedStd is the standard deviation of N(0, s^2) rounded to E2M1 magnitudes.
func quantizedStd(s float64) float64 {
	p := magnitudeProbs(s)
	var v float64
	for m, pm := range p {
		v += pm * e2m1Mag[m] * e2m1Mag[m]
	}
	return math.Sqrt(v)
}

// mxfp4Scale returns the base E8M0 exponent byte for weights of standard deviation std: the codes then
// have a standard deviation in [1.2, 2.4) (coarse groups half that), which uses the E2M1 range the way
// OCP scale selection does for Gaussian groups (their largest value near code 4 to 6).
func mxfp4Scale(std float64) (byte, error) {
	e := math.Floor(math.Log2(std / 1.2))
	s := e + 127
	if s < 0 || s+1 > 254 {
		return 0, fmt.Errorf("synth: MXFP4 std %g needs scale byte %g, outside 0..253", std, s)
	}
	return byte(s), nil
}

// expertTables caches code tables by target standard deviation: every expert of a preset shares two.
type expertTables struct {
	mu sync.Mutex
	m  map[float64]*codeTable
}

func (c *expertTables) get(std float64) *codeTable {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[float64]*codeTable{}
	}
	t, ok := c.m[std]
	if !ok {
		t = newCodeTable(std)
		c.m[std] = t
	}
	return t
}

// mxfp4Rows fills either the packed codes or the scales of one expert matrix. Both tensors derive the
// per-group choice of scale from the same stream (keyed by the scale tensor's name), so they agree.
type mxfp4Rows struct {
	scaleKey, codeKey uint64
	cols              int // logical width
	base              byte
	fine, coarse      *codeTable // codes for scale 2^base and 2^(base+1)
	packed            bool
}

func (f *mxfp4Rows) fill(dst []byte, r0, r1 int) {
	groups := f.cols / checkpoint.MXFP4GroupSize
	coarse := make([]bool, groups)
	rowBytes := groups
	if f.packed {
		rowBytes = f.cols / 2
	}
	for r := r0; r < r1; r++ {
		out := dst[(r-r0)*rowBytes : (r-r0+1)*rowBytes]
		sg := stream(f.scaleKey, r)
		for gi := range coarse {
			coarse[gi] = sg.intn(1000) < coarseGroupsPerMille
		}
		if !f.packed {
			for gi, c := range coarse {
				out[gi] = f.base
				if c {
					out[gi]++
				}
			}
			continue
		}
		cg := stream(f.codeKey, r)
		per := checkpoint.MXFP4GroupSize / 2 // bytes per group
		for gi, c := range coarse {
			t := f.fine
			if c {
				t = f.coarse
			}
			b := out[gi*per : (gi+1)*per]
			for j := 0; j < per; j += 2 { // one draw: four codes, two bytes
				x := cg.next()
				b[j] = t[x&0xffff] | t[x>>16&0xffff]<<4
				b[j+1] = t[x>>32&0xffff] | t[x>>48]<<4
			}
		}
	}
}

// expert returns the filler of an expert tensor (name ends in w1|w2|w3 .weight_packed|.weight_scale).
// w1 and w3 read the latent (width Latent) and give the SiTU inputs unit variance; w2 reads the SiTU
// output (rms about 0.6) and gives unit-variance outputs (the routed sum is RMS-normalised after anyway).
func (b *builder) expert(s checkpoint.Spec, field string) (filler, error) {
	mat, part, ok := strings.Cut(field, ".")
	var cols int
	var std float64
	switch mat {
	case "w1", "w3":
		cols, std = b.d.Latent, 1/math.Sqrt(float64(b.d.Latent))
	case "w2":
		cols, std = b.d.ExpertFFN, 1/(situRMS*math.Sqrt(float64(b.d.ExpertFFN)))
	default:
		ok = false
	}
	if !ok || (part != "weight_packed" && part != "weight_scale") {
		return nil, fmt.Errorf("synth: no construction for expert tensor %s", s.Name)
	}
	base, err := mxfp4Scale(std)
	if err != nil {
		return nil, fmt.Errorf("tensor %s: %w", s.Name, err)
	}
	unit := math.Ldexp(1, int(base)-127)
	prefix := strings.TrimSuffix(s.Name, part)
	return &mxfp4Rows{
		scaleKey: key(b.seed, prefix+"weight_scale"), codeKey: key(b.seed, prefix+"weight_packed"),
		cols: cols, base: base, packed: part == "weight_packed",
		fine: b.tables.get(std / unit), coarse: b.tables.get(std / (2 * unit)),
	}, nil
}
