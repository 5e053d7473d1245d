package cuda

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/potato-k3/potato-k3/cuda/bind"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// TestMLAHeadGroups: MLA version 2 processes heads in groups bounded by mlaTCTempMax; groups of 2 heads
// (three prep + attention launches) give the same bits as one group of all 6.
func TestMLAHeadGroups(t *testing.T) {
	b := testBackend(t, Options{Precision: ops.BF16, Sync: true})
	rng := rand.New(rand.NewPCG(31, 32))
	const heads = 6
	l := ops.Layout{Starts: []int{0, 130, 300}}
	rows := l.Tokens()
	mk := func(cols int) ops.Tensor {
		v := make([]float32, rows*cols)
		for i := range v {
			v[i] = float32(rng.NormFloat64())
		}
		x, err := b.FromHost(rows, cols, v)
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	q, kv, ks := mk(heads*192), mk(heads*256), mk(64)
	one, err := b.MLA(q, kv, ks, heads, 128, 64, 128, l)
	if err != nil {
		t.Fatal(err)
	}
	saved := mlaTCTempMax
	mlaTCTempMax = 2 * rows * (192 + 128) * 2
	defer func() { mlaTCTempMax = saved }()
	grouped, err := b.MLA(q, kv, ks, heads, 128, 64, 128, l)
	if err != nil {
		t.Fatal(err)
	}
	a, err := b.ToHost(one)
	if err != nil {
		t.Fatal(err)
	}
	g, err := b.ToHost(grouped)
	if err != nil {
		t.Fatal(err)
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(g[i]) {
			t.Fatalf("value %d: one group %g, groups of 2 heads %g", i, a[i], g[i])
		}
	}
	t.Logf("MLA version 2: %d values equal with one group of %d heads and with groups of 2", len(a), heads)
}

// TestMLAPrepTiming times k_mla_prep alone at 16 x 4096 tokens and 96 heads of K3's sizes (the bfloat16
// copy of keys and values that version 2 makes per group of heads); skipped with -short.
func TestMLAPrepTiming(t *testing.T) {
	skipTiming(t)
	b := testBackend(t, Options{Precision: ops.BF16})
	const heads, rows = 96, 16 * 4096
	k := mlaTCKernels[2]
	group := max(1, min(heads, mlaTCTempMax/(rows*(k.qkp+k.vp)*2)))
	prep := func() error {
		return b.run("prep", func(c *opCtx) error {
			kv, err := c.temp(rows * heads * 256 * 4)
			if err != nil {
				return err
			}
			ks, err := c.temp(rows * 64 * 4)
			if err != nil {
				return err
			}
			kb, err := c.temp(group * rows * k.qkp * 2)
			if err != nil {
				return err
			}
			vb, err := c.temp(group * rows * k.vp * 2)
			if err != nil {
				return err
			}
			sync := func() error {
				return b.drv.Check("cuStreamSynchronize", bind.Call(b.drv.CuStreamSynchronize, b.dv.Stream))
			}
			if err := sync(); err != nil {
				return err
			}
			start := time.Now()
			for h0 := 0; h0 < heads; h0 += group {
				hg := min(group, heads-h0)
				if err := c.launch("k_mla_prep", d1((hg*rows+7)/8), d1(256), 0, kb, vb, kv, ks, int64(rows), int32(heads),
					int32(h0), int32(hg), int32(128), int32(64), int32(128), int32(k.qkp), int32(k.vp), kv, ks, int64(rows)); err != nil {
					return err
				}
			}
			if err := sync(); err != nil {
				return err
			}
			t.Logf("TIMING k_mla_prep %d rows x %d heads in groups of %d: %.3f ms", rows, heads, group, float64(time.Since(start).Microseconds())/1e3)
			return nil
		})
	}
	for range 2 { // the first one warms up
		if err := prep(); err != nil {
			t.Fatal(err)
		}
	}
}
