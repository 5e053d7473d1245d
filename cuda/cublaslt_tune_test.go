package cuda

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/potato-k3/potato-k3/cuda/bind"
)

// TestLtTuneKeepsBits: ltTune on the experts' two shapes at K3's sizes (and a small one) pins a
// configuration whose outputs equal the heuristic's first bit for bit at row counts with partial tiles
// and at the tuned ones, and says how it chose.
func TestLtTuneKeepsBits(t *testing.T) {
	b := newLtBackend(t, false)
	rng := rand.New(rand.NewPCG(8, 9))
	for _, sh := range []struct{ m, k int }{{6144, 3584}, {3584, 3072}, {384, 256}} {
		t.Run(fmt.Sprintf("%dx%d", sh.m, sh.k), func(t *testing.T) {
			err := b.run("tune test", func(c *opCtx) error {
				h := c.b.lt
				first, err := h.plan(sh.m, sh.k, bind.R16BF) // a fresh plan, not the cached one
				if err != nil || !first.ok {
					return fmt.Errorf("no plan: %v %s", err, first.why)
				}
				defer h.dropLayout(first.adesc)
				tuned := *first
				if err := c.ltTune(&tuned, sh.m, sh.k, ltExpertTuneN); err != nil {
					return err
				}
				t.Logf("heuristic's first: %s", first.config.key())
				t.Logf("tuned: %s (%s)", tuned.config.key(), tuned.config.Tuned)
				if !tuned.tuned {
					return errors.New("ltTune left the shape untuned")
				}
				const most = 4700
				w, err1 := uploadTemp(c, randBF16Words(rng, sh.m*sh.k))
				x, err2 := uploadTemp(c, randBF16Words(rng, most*first.ldb))
				o1, err3 := c.temp(most * sh.m * 2)
				o2, err4 := c.temp(most * sh.m * 2)
				if err := errors.Join(err1, err2, err3, err4); err != nil {
					return err
				}
				for _, n := range []int{1, 7, 65, 1200, 4700} {
					if err := errors.Join(c.ltGemm(first, o1, x, w, n, sh.m, sh.k), c.ltGemm(&tuned, o2, x, w, n, sh.m, sh.k)); err != nil {
						return err
					}
					g1, g2 := make([]int32, n*sh.m/2), make([]int32, n*sh.m/2)
					if err := errors.Join(download(c.b, g1, o1), download(c.b, g2, o2)); err != nil {
						return err
					}
					if !bytes.Equal(bytesOf(g1), bytesOf(g2)) {
						t.Errorf("n=%d: the tuned configuration's bits differ from the heuristic's first", n)
					}
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}
