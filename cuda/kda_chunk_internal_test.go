package cuda

import (
	"fmt"
	"math/rand/v2"
	"os/exec"
	"strings"
	"testing"

	"github.com/potato-k3/potato-k3/replay/ops"
)

// TestKDAChunkKernel: the chunked kernel runs in BF16 precision with the tensor cores at head widths 64 and
// 128, decay bounds down to -5 and rows whose 16-row chunks stay below 2^31 values only; its shared memory
// lets two blocks of width 128 and four of width 64 (its __launch_bounds__) share an H200 SM (228 KiB,
// 1 KiB of it reserved for each block). No GPU needed.
func TestKDAChunkKernel(t *testing.T) {
	const k3 = 96 * 128 // K3's channels
	for _, c := range []struct {
		bf, tc bool
		ch, d  int
		lower  float32
		want   string
	}{
		{true, true, k3, 128, -5, "k_kda_chunk_r128"}, {true, true, 64, 64, -5, "k_kda_chunk_r64"}, {true, true, k3, 128, -1, "k_kda_chunk_r128"},
		{true, true, k3, 128, -6, ""}, {true, true, k3, 32, -5, ""}, {true, true, k3, 48, -5, ""}, {true, false, k3, 128, -5, ""},
		{false, true, k3, 128, -5, ""}, {false, false, k3, 64, -5, ""},
		// a chunk of 16 rows at 32-bit offsets: 2^27 channels still fit, one head more does not
		{true, true, 1 << 27, 128, -5, ""}, {true, true, 1<<27 - 128, 128, -5, "k_kda_chunk_r128"},
	} {
		if got := kdaChunkKernelFor(c.bf, c.tc, c.ch, c.d, c.lower); got != c.want {
			t.Errorf("bf %v, tensor cores %v, %d channels of width %d, lower %g: %q, want %q", c.bf, c.tc, c.ch, c.d, c.lower, got, c.want)
		}
	}
	for _, c := range []struct{ d, blocks int }{{128, 2}, {64, 4}} {
		if n := kdaChunkSmem(c.d); c.blocks*(n+1024) > 228*1024 {
			t.Errorf("width %d: %d bytes of shared memory a block: %d blocks do not fit an SM", c.d, n, c.blocks)
		}
	}
}

// TestKDAChunkSmem: kdaChunkSmem, which the launch passes, is kda_chunk.cu's kda_chunk_smem at both widths
// (g++ evaluates the kernel file's constexpr function against the Go values in a static_assert). Skipped
// where g++ is not installed.
func TestKDAChunkSmem(t *testing.T) {
	gxx, prelude := hostCpp(t)
	src := fmt.Sprintf("#include \"kda_chunk.cu\"\nstatic_assert(4 * kda_chunk_smem(128) == %d && 4 * kda_chunk_smem(64) == %d, \"kdaChunkSmem\");\n",
		kdaChunkSmem(128), kdaChunkSmem(64))
	cmd := exec.Command(gxx, "-std=c++17", "-fsyntax-only", "-w", "-fpermissive", "-include", prelude, "-I", "kernels", "-x", "c++", "-")
	cmd.Stdin = strings.NewReader(src)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("kdaChunkSmem(128) = %d, kdaChunkSmem(64) = %d: not kda_chunk_smem's bytes: %v\n%s", kdaChunkSmem(128), kdaChunkSmem(64), err, out)
	}
}

// TestKDAChunkSlices: the chunked kernel over slices of every size from 1 to 17 and a few past 2 chunks
// (every residue of its 16-row chunks, boundaries inside and at chunk starts, a carry of pre rows that
// itself holds pre rows) gives the unsliced output bit for bit, at width 128 and 64, 2 heads; and the
// unsliced output is within KDA's BF16 tolerance of the CPU backend. The kernel's narrow form, q, k and v
// read from bfloat16 copies, gives the same bits, whole and sliced.
func TestKDAChunkSlices(t *testing.T) {
	b := testBackend(t, Options{Precision: ops.BF16})
	l := ops.Layout{Starts: []int{0, 1, 16, 32, 49, 89, 189}} // sequences of 1, 15, 16, 17, 40, 100
	rows := l.Tokens()
	for _, d := range []int{128, 64} {
		const heads = 2
		if b.kdaChunkKernel(heads*d, d, -5) == "" {
			t.Skipf("no chunked kernel for width %d on this device", d)
		}
		in := newKDAInputs(t, b, rand.New(rand.NewPCG(uint64(d), 99)), rows, heads, d)
		whole, err := kdaOn(b, in.dev, heads, l)
		if err != nil {
			t.Fatal(err)
		}
		checkKDANear(t, fmt.Sprintf("d%d unsliced", d), whole, kdaCPU(t, ops.BF16, in, l), heads*d, true)
		ch := heads * d
		sizes := []int{31, 32, 33, 47, 100}
		for n := 1; n <= 17; n++ {
			sizes = append(sizes, n)
		}
		for _, n := range sizes {
			got := kdaSliced(t, b, in, heads, l, n, false)
			if i := firstDiff(got, whole); i >= 0 {
				t.Errorf("d%d, slices of %d: row %d col %d differs from the unsliced output (%g, want %g)", d, n, i/ch, i%ch, got[i], whole[i])
			}
		}
		// the narrow form, q, k and v read from narrow-only tensors' bfloat16 copies (ShortConvSiLU's
		// outputs in BF16 precision): the float32 form's bits, unsliced and sliced (the carried rows of q,
		// k and v stay narrow-only: catRows copies the bfloat16 rows), reading the copies in place (its
		// inputs still narrow-only after it, where the float32 form would have widened them)
		x := in.dev
		for i := range 3 {
			x[i] = narrowOnlyCopy(t, b, in.dev[i])
		}
		y, err := b.KDA(x[0], x[1], x[2], x[3], x[4], x[5], x[6], heads, -5, l)
		for i := range 3 {
			if !x[i].(*Tensor).narrowOnly {
				t.Errorf("d%d: KDA widened its narrow-only input %d: the narrow kernel did not run", d, i)
			}
			b.Free(x[i])
		}
		if err != nil {
			t.Fatal(err)
		}
		if !y.(*Tensor).narrowOnly {
			t.Errorf("d%d: the narrow form's output is not narrow-only", d)
		}
		got, err := b.ToHost(y)
		b.Free(y)
		if err != nil {
			t.Fatal(err)
		}
		if i := firstDiff(got, whole); i >= 0 {
			t.Errorf("d%d unsliced: row %d col %d: narrow inputs give %g, float32 inputs %g", d, i/ch, i%ch, got[i], whole[i])
		}
		for n := 1; n <= 17; n++ {
			got := kdaSliced(t, b, in, heads, l, n, true)
			if i := firstDiff(got, whole); i >= 0 {
				t.Errorf("d%d, narrow inputs in slices of %d: row %d col %d differs from the unsliced output (%g, want %g)", d, n, i/ch, i%ch, got[i], whole[i])
			}
		}
		in.free(b)
	}
}

// kdaSliced runs KDA over l in slices of n rows (runSliced), each slice's carry handed to the next, and
// returns the outputs of every slice in order. With narrow, each slice's q, k and v are narrow-only
// (narrowOnlyCopy, as ShortConvSiLU writes them), and so must be the carried rows of them.
func kdaSliced(t *testing.T, b *Backend, in *kdaInputs, heads int, l ops.Layout, n int, narrow bool) []float32 {
	t.Helper()
	return runSliced(t, b, l, n, func(j, lo, hi int, sl ops.SliceLayout, prev ops.Carry) (ops.Tensor, ops.Carry, error) {
		x := in.rowsOf(t, b, lo, hi)
		if narrow {
			for i := range 3 {
				y := narrowOnlyCopy(t, b, x[i])
				b.Free(x[i])
				x[i] = y
			}
		}
		y, next, err := b.KDASlice(x[0], x[1], x[2], x[3], x[4], x[5], x[6], heads, -5, sl, prev)
		if narrow && err == nil {
			for i := range 3 {
				if !x[i].(*Tensor).narrowOnly {
					t.Errorf("slices of %d: slice %d: KDA widened its narrow-only input %d: the narrow kernel did not run", n, j, i)
				}
			}
			if c, ok := next.(*carry); ok && len(c.t) == 6 {
				for i := 1; i <= 3; i++ {
					if !c.t[i].narrowOnly {
						t.Errorf("slices of %d: slice %d: carried rows of input %d are not narrow-only", n, j, i-1)
					}
				}
			}
		}
		for i := range 5 {
			b.Free(x[i])
		}
		return y, next, err
	})
}

// runSliced runs op over l in slices of n rows (ops.CutSlices): op gets slice j's index, its rows lo..hi
// of the wave, its layout and the carry of the slice before, and returns the slice's output and its
// carry; the outputs' values are returned in order, every output and carry freed.
func runSliced(t *testing.T, b *Backend, l ops.Layout, n int, op func(j, lo, hi int, sl ops.SliceLayout, c ops.Carry) (ops.Tensor, ops.Carry, error)) []float32 {
	t.Helper()
	slices := ops.CutSlices(l, n)
	bounds := ops.SliceBounds(slices)
	var c ops.Carry
	var got []float32
	for j, sl := range slices {
		y, next, err := op(j, bounds[j], bounds[j+1], sl, c)
		if err != nil {
			t.Fatalf("slices of %d: slice %d (%v): %v", n, j, sl, err)
		}
		if c != nil {
			b.Free(c)
		}
		c = next
		h, err := b.ToHost(y)
		b.Free(y)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, h...)
	}
	if c != nil {
		b.Free(c)
	}
	return got
}

// narrowOnlyCopy returns a narrow-only tensor of x's values (narrow.go: the bfloat16 copy alone), as
// ShortConvSiLU writes its outputs in BF16 precision where the chunked KDA kernel runs.
func narrowOnlyCopy(t *testing.T, b *Backend, x ops.Tensor) *Tensor {
	t.Helper()
	xt := x.(*Tensor)
	var out *Tensor
	err := b.run("narrowOnlyCopy", func(c *opCtx) error {
		xp, err := c.f32(xt)
		if err != nil {
			return err
		}
		if out, err = c.out(xt.rows, xt.cols); err != nil {
			return err
		}
		err = c.keepNarrow(out, xt.cols, func(nb uint64) error { return c.toBF16(nb, xp, xt.rows, xt.cols, xt.cols) })
		out.narrowOnly = err == nil
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
