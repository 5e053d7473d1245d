package cuda

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/potato-k3/potato-k3/replay/ops"
)

// TestRowOf: which pointer ranges are whole rows of a float32 activation (narrow.go). No GPU needed.
func TestRowOf(t *testing.T) {
	x := &Tensor{ptr: 1 << 20, rows: 10, cols: 6, dt: dtF32}
	for _, c := range []struct {
		name string
		t    *Tensor
		p    uint64
		n, k int
		row  int
		ok   bool
	}{
		{"whole", x, x.ptr, 10, 6, 0, true},
		{"rows 3..9", x, x.ptr + 3*24, 7, 6, 3, true},
		{"past the end", x, x.ptr + 3*24, 8, 6, 0, false},
		{"mid-row", x, x.ptr + 4, 1, 6, 0, false},
		{"before", x, x.ptr - 24, 1, 6, 0, false},
		{"other width", x, x.ptr, 10, 5, 0, false},
		{"a weight", &Tensor{ptr: 1 << 20, rows: 10, cols: 6, dt: dtBF16}, 1 << 20, 10, 6, 0, false},
		{"none", nil, 1 << 20, 1, 6, 0, false},
	} {
		row, ok := c.t.rowOf(c.p, c.n, c.k)
		if ok != c.ok || (ok && row != c.row) {
			t.Errorf("%s: rowOf = %d, %v, want %d, %v", c.name, row, ok, c.row, c.ok)
		}
	}
}

// TestNarrowCopy: a matmul's x keeps its bfloat16 copy (narrow.go) for the next matmuls and the router,
// which give the bits of a fresh tensor with the same values; ExpertsAccumulate into the tensor drops
// the copy, and a matmul after it reads the new values.
func TestNarrowCopy(t *testing.T) {
	b := newLtBackend(t, true)
	rng := rand.New(rand.NewPCG(5, 6))
	const latent, ffn, rows = 256, 192, 131
	c := newExpertsCase(t, b, rng, latent, ffn, rows, []int{2, 7}, []int{40, 90})
	defer c.free(b)
	var planned bool // both weight shapes run on cuBLASLt (else nothing keeps a copy)
	if err := b.run("plans", func(c *opCtx) error {
		s1, err := c.b.lt.shape(96, latent)
		if err != nil {
			return err
		}
		s2, err := c.b.lt.shape(200, latent)
		planned = err == nil && s1.ok && s2.ok
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if !planned {
		t.Skip("no pinned cuBLASLt algorithm for the test's weight shapes")
	}
	w1, w2 := bf16Weight(t, b, rng, 96, latent, 0.05), bf16Weight(t, b, rng, 200, latent, 0.05)
	defer b.Free(w1)
	defer b.Free(w2)
	product := func(x []float32, w ops.Tensor) []float32 { // on a fresh tensor of these values
		t.Helper()
		xt, err := b.FromHost(rows, latent, x)
		if err != nil {
			t.Fatal(err)
		}
		defer b.Free(xt)
		return matmulHost(t, b, xt, w)
	}
	acc, err := b.FromHost(rows, latent, c.accv)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free(acc)
	accv, err := b.ToHost(acc)
	if err != nil {
		t.Fatal(err)
	}
	sameBits(t, "first matmul", matmulHost(t, b, acc, w1), product(accv, w1), 96)
	if acc.(*Tensor).narrow == 0 {
		t.Fatal("no bfloat16 copy kept after a cuBLASLt matmul")
	}
	sameBits(t, "second matmul, from the kept copy", matmulHost(t, b, acc, w2), product(accv, w2), 200)
	z, err := b.FromHost(rows, latent, c.zv)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free(z)
	if err := b.ExpertsAccumulate(acc, z, c.rt, c.es, 4, 25); err != nil {
		t.Fatal(err)
	}
	if acc.(*Tensor).narrow != 0 {
		t.Error("ExpertsAccumulate left a stale bfloat16 copy of its acc")
	}
	after, err := b.ToHost(acc)
	if err != nil {
		t.Fatal(err)
	}
	sameBits(t, "matmul after the accumulation", matmulHost(t, b, acc, w1), product(after, w1), 96)
}

// matmulHost returns x w^T copied out.
func matmulHost(t *testing.T, b *Backend, x, w ops.Tensor) []float32 {
	t.Helper()
	y, err := b.MatMul(x, w)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free(y)
	v, err := b.ToHost(y)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestNormNarrowCopy: RMSNorm and GatedRMSNorm (norm.cu version 2), and MulSigmoid (k_mul_sigmoid4n),
// write their output's bfloat16 copy in BF16 precision on cuBLASLt (keepsNarrow), equal to the output's
// values; a MatMul and the fused FFN that read it give the bits of a fresh tensor with the same values
// (which they convert themselves); and widths that are not a multiple of 8 keep no copy.
func TestNormNarrowCopy(t *testing.T) {
	b := newLtBackend(t, true)
	rng := rand.New(rand.NewPCG(7, 8))
	const rows = 131
	for _, c := range []struct {
		cols, g int // x's width and the norm's group
		gated   bool
		copy    bool
		mul     bool // MulSigmoid(x, gate) instead of a norm
	}{{256, 256, false, true, false}, {384, 128, true, true, false}, {260, 260, false, false, false},
		{384, 128, false, true, true}, {260, 260, false, false, true}} {
		x, err := b.FromHost(rows, c.cols, fastFill(rng, rows*c.cols, 2))
		if err != nil {
			t.Fatal(err)
		}
		gate, err := b.FromHost(rows, c.cols, fastFill(rng, rows*c.cols, 2))
		if err != nil {
			t.Fatal(err)
		}
		w := bf16Weight(t, b, rng, 1, c.g, 1)
		var y ops.Tensor
		switch {
		case c.mul:
			y, err = b.MulSigmoid(x, gate)
		case c.gated:
			y, err = b.GatedRMSNorm(x, w, gate, 1e-5)
		default:
			y, err = b.RMSNorm(x, w, 1e-5)
		}
		if err != nil {
			t.Fatal(err)
		}
		yt := y.(*Tensor)
		if (yt.narrow != 0) != c.copy {
			t.Fatalf("width %d (groups of %d): a bfloat16 copy %v, want %v", c.cols, c.g, yt.narrow != 0, c.copy)
		}
		yv, err := b.ToHost(y)
		if err != nil {
			t.Fatal(err)
		}
		if c.copy {
			raw := make([]byte, 2*rows*c.cols)
			if err := b.dv.ToHost(raw, yt.narrow); err != nil {
				t.Fatal(err)
			}
			for i, v := range yv {
				if got := uint16(raw[2*i]) | uint16(raw[2*i+1])<<8; got != uint16(math.Float32bits(v)>>16) {
					t.Fatalf("width %d: copy[%d] = %#04x, output %g", c.cols, i, got, v)
				}
			}
		}
		fresh, err := b.FromHost(rows, c.cols, yv)
		if err != nil {
			t.Fatal(err)
		}
		mw := bf16Weight(t, b, rng, 96, c.cols, 0.05)
		sameBits(t, "MatMul from the norm's copy", matmulHost(t, b, y, mw), matmulHost(t, b, fresh, mw), 96)
		fw := newFFNWeights(t, b, rng, 64, c.cols)
		if why := ffnPath(t, b, y, fw); why != "" {
			t.Logf("width %d: the FFN runs unfused (%s)", c.cols, why)
		}
		sameBits(t, "SiTUFFN from the norm's copy", ffnHost(t, b, y, fw, true), ffnHost(t, b, fresh, fw, true), c.cols)
		for _, v := range []ops.Tensor{x, gate, w, y, fresh, mw} {
			b.Free(v)
		}
	}
}
