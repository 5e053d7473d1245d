package cuda

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/potato-k3/potato-k3/replay/ops"
)

// TestSiTURows8: the SiTU pass of the cuBLASLt expert path with eight columns a thread
// (k_experts_situ_rows8) gives the element form's bits (k_experts_situ_rows) over random bfloat16 gate
// and up values (every exponent, signs, NaN and Inf patterns included), with widths of one and of several
// thread blocks and more rows than a grid has blocks in y (the row loop).
func TestSiTURows8(t *testing.T) {
	b := testBackend(t, Options{Precision: ops.BF16})
	rng := rand.New(rand.NewPCG(21, 22))
	for _, c := range []struct{ n, ffn int }{{1, 8}, {3, 96}, {5, 3072}, {maxGridY + 3, 16}, {17, 1032}} {
		t.Run(fmt.Sprintf("%dx%d", c.n, c.ffn), func(t *testing.T) {
			gu := make([]int32, c.n*2*c.ffn/2) // two bfloat16 values a word
			for i := range gu {
				gu[i] = int32(rng.Uint32())
			}
			var got, want []int32
			err := b.run("test", func(x *opCtx) error {
				tab, err := x.situTables(4, 25)
				if err != nil {
					return err
				}
				in, err := uploadTemp(x, gu)
				if err != nil {
					return err
				}
				h8, err1 := x.temp(2 * c.n * c.ffn)
				h1, err2 := x.temp(2 * c.n * c.ffn)
				if err1 != nil || err2 != nil {
					return fmt.Errorf("%v %v", err1, err2)
				}
				if err := x.situRows(h8, in, c.n, c.ffn, tab); err != nil {
					return err
				}
				if err := x.launch1D("k_experts_situ_rows", c.n*c.ffn, h1, in, int64(c.n), int32(c.ffn), tab); err != nil {
					return err
				}
				got, want = make([]int32, c.n*c.ffn/2), make([]int32, c.n*c.ffn/2)
				if err := download(x.b, got, h8); err != nil {
					return err
				}
				return download(x.b, want, h1)
			})
			if err != nil {
				t.Fatal(err)
			}
			for i := range got {
				if got[i] != want[i] {
					g, w := uint32(got[i]), uint32(want[i])
					t.Fatalf("word %d (row %d): rows8 %04x %04x, element form %04x %04x", i, 2*i/c.ffn, g&0xffff, g>>16, w&0xffff, w>>16)
				}
			}
		})
	}
}

// TestGather8: the gather of the expert path with eight columns a thread (k_experts_gather8) gives
// k_experts_gather's bfloat16 rows over random float32 bit patterns (NaN and Inf included) and random row
// lists with repeats, at widths of one and several thread blocks and more rows than a grid has blocks in y.
func TestGather8(t *testing.T) {
	b := testBackend(t, Options{Precision: ops.BF16})
	rng := rand.New(rand.NewPCG(23, 24))
	for _, c := range []struct{ zrows, n, cols int }{{1, 1, 8}, {5, 9, 1032}, {40, 300, 3584}, {7, maxGridY + 3, 16}} {
		t.Run(fmt.Sprintf("%d of %dx%d", c.n, c.zrows, c.cols), func(t *testing.T) {
			z := make([]int32, c.zrows*c.cols)
			for i := range z {
				z[i] = int32(rng.Uint32())
			}
			rows := make([]int32, c.n)
			for i := range rows {
				rows[i] = int32(rng.IntN(c.zrows))
			}
			var got, want []int32
			err := b.run("test", func(x *opCtx) error {
				zp, err1 := uploadTemp(x, z)
				rp, err2 := uploadTemp(x, rows)
				o8, err3 := x.temp(2 * c.n * c.cols)
				o4, err4 := x.temp(2 * c.n * c.cols)
				if err := errors.Join(err1, err2, err3, err4); err != nil {
					return err
				}
				d := &groupedDev{plan: &groupedPlan{rows: c.n}, zs: o8, z: zp, latent: c.cols}
				d.tab, d.plan.offRows = rp, 0
				if err := x.groupedGather(d); err != nil {
					return err
				}
				if err := x.launch1D("k_experts_gather", c.n*c.cols/4, o4, zp, rp, int64(c.n), int32(c.cols)); err != nil {
					return err
				}
				got, want = make([]int32, c.n*c.cols/2), make([]int32, c.n*c.cols/2)
				if err := download(x.b, got, o8); err != nil {
					return err
				}
				return download(x.b, want, o4)
			})
			if err != nil {
				t.Fatal(err)
			}
			for i := range got {
				if got[i] != want[i] {
					t.Fatalf("word %d (gathered row %d): gather8 %08x, gather %08x", i, 2*i/c.cols, uint32(got[i]), uint32(want[i]))
				}
			}
		})
	}
}
