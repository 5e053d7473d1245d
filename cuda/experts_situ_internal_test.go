package cuda

import (
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
