package cuda

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/potato-k3/potato-k3/cuda/bind"
)

// TestCuBLASLtRowBlocks times the ways gemmLt could run a rounded BF16-precision matmul over one 76,800-row
// slice at K3's dense shapes, each checked bit for bit against today's on the first and last 1,024 rows:
//
//   - today: one cuBLASLt call with float32 outputs, then k_round4 in place (12 bytes of traffic an output);
//   - the same call in row blocks of 4,096 to 16,384 (TestCuBLASLtSurvey, run 66: 771 TFLOP/s at 4,096
//     rows of 12288 x 7168 against 702 at 76,800; a row's sum does not depend on the call it falls in);
//   - bfloat16 outputs from cuBLASLt's epilogue (round to nearest even, the k_round bits for numbers)
//     widened by k_widen_bf16 (8 bytes an output), whole and in blocks of 8,192 through one bounded buffer;
//   - CTA swizzling on in the pinned configuration (the heuristic offered none with it), if accepted.
//
// It changes nothing: it is the evidence for the next change to gemmLt. A line per (shape, variant):
// milliseconds, TFLOP/s and whether the bits equal today's. Skipped with -short.
func TestCuBLASLtRowBlocks(t *testing.T) {
	skipTiming(t)
	b := newLtBackend(t, false)
	h := b.lt
	const n, edge = 76800, 1024
	rng := rand.New(rand.NewPCG(4, 6))
	for _, sh := range []struct {
		what string
		m, k int
	}{
		{"kda q/k/v/g", 12288, 7168}, {"o_proj", 7168, 12288}, {"latent down", 3584, 7168},
		{"latent up", 7168, 3584}, {"shared gate, up", 6144, 7168}, {"shared down", 7168, 6144},
		{"q_b", 18432, 1536}, {"kv_b", 24576, 512},
	} {
		err := b.run("row blocks", func(c *opCtx) error {
			m, k := sh.m, sh.k
			s, err := h.shape(m, k)
			if err != nil || !s.ok {
				return fmt.Errorf("%s: no pinned plan: %v", sh.what, err)
			}
			s16, err := h.shapeOut(m, k, bind.R16BF)
			if err != nil || !s16.ok {
				return fmt.Errorf("%s: no pinned bfloat16-output plan: %v", sh.what, err)
			}
			w, err1 := uploadTemp(c, randBF16Words(rng, m*k))
			x, err2 := uploadTemp(c, randBF16Words(rng, n*s.ldb))
			out, err3 := c.temp(4 * n * m)
			tmp, err4 := c.temp(2 * n * m)
			if err := errors.Join(err1, err2, err3, err4); err != nil {
				return err
			}
			tm := newEventTimer(c)
			defer tm.destroy()
			edges := func() ([]int32, error) { // the first and last edge rows of out
				v := make([]int32, 2*edge*m)
				err := errors.Join(download(c.b, v[:edge*m], out), download(c.b, v[edge*m:], out+uint64(4*(n-edge)*m)))
				return v, err
			}
			blocks := func(rows int, each func(r0, rn int) error) error {
				for r0 := 0; r0 < n; r0 += rows {
					if err := each(r0, min(rows, n-r0)); err != nil {
						return err
					}
				}
				return nil
			}
			f32Blocks := func(rows int) func() error {
				return func() error {
					err := blocks(rows, func(r0, rn int) error {
						return c.ltGemm(s, out+uint64(4*r0*m), x+uint64(2*r0*s.ldb), w, rn, m, k)
					})
					if err != nil {
						return err
					}
					return c.roundF32(out, out, n*m, 1)
				}
			}
			bf16Blocks := func(rows int) func() error {
				return func() error {
					return blocks(rows, func(r0, rn int) error {
						if err := c.ltGemm(s16, tmp, x+uint64(2*r0*s.ldb), w, rn, m, k); err != nil {
							return err
						}
						return c.launch1D("k_widen_bf16", rn*m, out+uint64(4*r0*m), tmp, int64(rn*m))
					})
				}
			}
			swz := *s
			on := uint32(1)
			swErr := h.configSet(&swz.algo, bind.LtAlgoConfigCTASwizzling, unsafe.Pointer(&on), 4)
			variants := []struct {
				what string
				fn   func() error
			}{
				{"today: one call, float32 out, k_round4", f32Blocks(n)},
				{"blocks of 4,096", f32Blocks(4096)},
				{"blocks of 8,192", f32Blocks(8192)},
				{"blocks of 16,384", f32Blocks(16384)},
				{"bfloat16 out + widen, one call", bf16Blocks(n)},
				{"bfloat16 out + widen, blocks of 8,192", bf16Blocks(8192)},
				{"CTA swizzling on", func() error {
					if swErr != nil {
						return swErr
					}
					if err := c.ltGemm(&swz, out, x, w, n, m, k); err != nil {
						return err
					}
					return c.roundF32(out, out, n*m, 1)
				}},
			}
			var want []int32
			flop := 2 * float64(n) * float64(m) * float64(k)
			for i, v := range variants {
				if err := v.fn(); err != nil {
					t.Logf("TIMING row blocks %-16s %-42s failed: %v", sh.what, v.what, err)
					continue
				}
				got, err := edges()
				if err != nil {
					return err
				}
				if i == 0 {
					want = got
				}
				ms, err := tm.time(3, v.fn)
				if err != nil {
					return fmt.Errorf("%s, %s: %w", sh.what, v.what, err)
				}
				same := bytes.Equal(bytesOf(got), bytesOf(want))
				t.Logf("TIMING row blocks %-16s %5dx%-5d n=%d %-42s %8.3f ms %6.1f TFLOP/s same bits %v",
					sh.what, m, k, n, v.what, ms, flop/ms/1e9, same)
				if !same && i < 6 { // blocks and the epilogue's rounding must not move a bit
					t.Errorf("%s: %s: bits differ from one call with k_round4", sh.what, v.what)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}
