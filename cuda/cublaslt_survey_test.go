package cuda

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/potato-k3/potato-k3/cuda/bind"
)

// TestCuBLASLtSurvey times every configuration cuBLASLt's heuristic offers for the engine's bfloat16
// shapes at K3's sizes (asked at several representative row counts, each pinned and checked as plan
// does: split-K 1, no reduction, valid at every probe n within ltMaxWorkspace), at the row counts the
// engine gives them, and compares each one's output with the pinned algorithm's, bit for bit. It changes
// nothing: it is the evidence for choosing the pinned configuration by another rule (the heuristic's
// first at n = ltRepN is what plan pins). A line per (shape, n, configuration): the configuration,
// milliseconds, TFLOP/s, and whether its bits equal the pinned one's. Skipped with -short.
func TestCuBLASLtSurvey(t *testing.T) {
	skipTiming(t)
	b := newLtBackend(t, false)
	h := b.lt
	cases := []struct {
		what string
		m, k int
		out  uintptr
		ns   []int // row counts timed; bits compared at the first
	}{
		{"experts gate/up", 6144, 3584, bind.R16BF, []int{4700, 604, 8192}},
		{"experts down", 3584, 3072, bind.R16BF, []int{4700, 604, 8192}},
		{"kda q/k/v/g", 12288, 7168, bind.R32F, []int{4096, 76800}},
		{"o_proj", 7168, 12288, bind.R32F, []int{4096, 76800}},
		{"latent down", 3584, 7168, bind.R32F, []int{4096, 76800}},
		{"latent up", 7168, 3584, bind.R32F, []int{4096, 76800}},
		{"q_b", 18432, 1536, bind.R32F, []int{4096, 76800}},
		{"kv_b", 24576, 512, bind.R32F, []int{4096, 76800}},
		{"f_b", 12288, 128, bind.R32F, []int{4096, 76800}},
		{"shared gate, up", 6144, 7168, bind.R32F, []int{4096, 76800}},
		{"shared down", 7168, 6144, bind.R32F, []int{4096, 76800}},
		{"q_a", 1536, 7168, bind.R32F, []int{4096, 76800}},
	}
	rng := rand.New(rand.NewPCG(3, 5))
	for _, tc := range cases {
		err := b.run("survey", func(c *opCtx) error {
			def, err := h.shapeOut(tc.m, tc.k, tc.out)
			if err != nil || !def.ok {
				return fmt.Errorf("%s %dx%d: no pinned plan: %v %s", tc.what, tc.m, tc.k, err, def.why)
			}
			s := &ltShape{ldb: def.ldb, out: tc.out, adesc: def.adesc, ok: true, algo: def.algo, config: def.config}
			cands, err := h.candidates(s, tc.m, tc.k)
			if err != nil {
				return err
			}
			most := 0
			for _, n := range tc.ns {
				most = max(most, n)
			}
			w, err1 := uploadTemp(c, randBF16Words(rng, tc.m*tc.k))
			x, err2 := uploadTemp(c, randBF16Words(rng, most*s.ldb))
			out, err3 := c.temp(most * tc.m * def.outBytes())
			if err := errors.Join(err1, err2, err3); err != nil {
				return err
			}
			var want []int32
			for ni, n := range tc.ns {
				flop := 2 * float64(n) * float64(tc.m) * float64(tc.k)
				for ci := range cands {
					cand := &cands[ci]
					fn := func() error { return c.ltGemm(cand, out, x, w, n, tc.m, tc.k) }
					same := "-"
					if ni == 0 {
						if err := fn(); err != nil {
							return err
						}
						got := make([]int32, n*tc.m*def.outBytes()/4)
						if err := download(c.b, got, out); err != nil {
							return err
						}
						if ci == 0 {
							want = got
						}
						same = fmt.Sprint(bytes.Equal(bytesOf(got), bytesOf(want)))
					}
					ms, err := eventTime(c, 5, fn)
					if err != nil {
						return fmt.Errorf("%s, %s, n=%d: %w", tc.what, cand.config.key(), n, err)
					}
					mark := " "
					if ci == 0 {
						mark = "*"
					}
					t.Logf("TIMING survey %-15s %5dx%-5d n=%5d %s %-62s %8.4f ms %6.1f TFLOP/s same bits %s",
						tc.what, tc.m, tc.k, n, mark, cand.config.key(), ms, flop/ms/1e9, same)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}
