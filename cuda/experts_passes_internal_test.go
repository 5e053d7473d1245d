package cuda

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/potato-k3/potato-k3/replay/ops"
)

// The cuBLASLt expert path's passes around its GEMMs (the SiTU pass, the gather, the decode), each in the
// vectorised form the path launches against the element form it replaced, bit for bit.

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
				got, want, err = downloadPair(x.b, c.n*c.ffn/2, h8, h1)
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			sameWords(t, "rows8", got, want, c.ffn)
		})
	}
}

// TestGather8: the gather of the expert path with eight columns a thread (k_experts_gather8) gives
// k_experts_gather's bfloat16 rows over random float32 bit patterns (NaN and Inf included) and random row
// lists with repeats, at widths of one and several thread blocks and more rows than a grid has blocks in y;
// and so does the gather from z's bfloat16 copy (k_experts_gather8b, the cuBLASLt path's: z converted by
// toBF16, as narrowOf makes the copy).
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
			var got, gotb, want []int32
			err := b.run("test", func(x *opCtx) error {
				zp, err1 := uploadTemp(x, z)
				rp, err2 := uploadTemp(x, rows)
				o8, err3 := x.temp(2 * c.n * c.cols)
				o4, err4 := x.temp(2 * c.n * c.cols)
				ob, err5 := x.temp(2 * c.n * c.cols)
				zb, err6 := x.temp(2 * c.zrows * c.cols)
				if err := errors.Join(err1, err2, err3, err4, err5, err6); err != nil {
					return err
				}
				d := &groupedDev{plan: &groupedPlan{rows: c.n}, zs: o8, z: zp, latent: c.cols}
				d.tab, d.plan.offRows = rp, 0
				if err := x.groupedGather(d); err != nil {
					return err
				}
				if err := x.toBF16(zb, zp, c.zrows, c.cols, c.cols); err != nil {
					return err
				}
				db := *d
				db.zs, db.zb = ob, zb
				if err := x.groupedGather(&db); err != nil {
					return err
				}
				if err := x.launch1D("k_experts_gather", c.n*c.cols/4, o4, zp, rp, int64(c.n), int32(c.cols)); err != nil {
					return err
				}
				var err error
				if got, want, err = downloadPair(x.b, c.n*c.cols/2, o8, o4); err != nil {
					return err
				}
				gotb, _, err = downloadPair(x.b, c.n*c.cols/2, ob, o4)
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			sameWords(t, "gather8", got, want, c.cols)
			sameWords(t, "gather8b", gotb, want, c.cols)
		})
	}
}

// TestDecode8: the expert decode a word a thread (k_experts_decode8, what the cuBLASLt path runs) gives
// k_experts_decode's bfloat16 values for random codes under every scale byte 0..255 (the PRMT decoder
// and its float32 fallback), for a list of experts that skips one.
func TestDecode8(t *testing.T) {
	b := testBackend(t, Options{Precision: ops.BF16})
	rng := rand.New(rand.NewPCG(25, 26))
	const latent, ffn = 96, 64
	var es []*Expert
	var work []ops.ExpertRows
	for id := range 3 {
		parts := randExpertBytes(rng, latent, ffn)
		for i := 1; i < 6; i += 2 {
			for j := range parts[i] {
				parts[i][j] = byte(j + 7*id + i) // every scale byte in each matrix
			}
		}
		e, err := b.UploadExpert(id, latent, ffn, parts[0], parts[1], parts[2], parts[3], parts[4], parts[5])
		if err != nil {
			t.Fatal(err)
		}
		defer b.Free(e)
		es = append(es, e.(*Expert))
		rows := []int32{0}
		if id == 1 {
			rows = nil // no rows: not in the decode list
		}
		work = append(work, ops.ExpertRows{Rows: rows, Weights: make([]float32, len(rows))})
	}
	p := planGroupedTiles(es, work, 1, xTileRows)
	if len(p.nonzero) != 2 {
		t.Fatalf("decode list %v, want two experts", p.nonzero)
	}
	slot := 3 * ffn * latent
	var got, want []int32
	err := b.run("test", func(c *opCtx) error {
		if err := b.joinExperts(es); err != nil {
			return err
		}
		tab, err1 := uploadTemp(c, p.buf)
		o8, err2 := c.temp(2 * slot * 2)
		o32, err3 := c.temp(2 * slot * 2)
		if err := errors.Join(err1, err2, err3); err != nil {
			return err
		}
		list := tab + 4*uint64(p.offList)
		if err := c.decodeExperts(o8, tab, list, 2, ffn, latent); err != nil {
			return err
		}
		if err := c.launch("k_experts_decode", d2((slot/32+xThreads-1)/xThreads, 2), d1(xThreads), 0,
			o32, tab, list, int32(ffn), int32(latent)); err != nil {
			return err
		}
		var err error
		got, want, err = downloadPair(c.b, slot, o8, o32)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	sameWords(t, "decode8", got, want, slot) // a "row" is an expert's slot
}

// downloadPair returns n words from each of the vectorised form's output at p and the element form's at q.
func downloadPair(b *Backend, n int, p, q uint64) (got, want []int32, err error) {
	got, want = make([]int32, n), make([]int32, n)
	if err := download(b, got, p); err != nil {
		return nil, nil, err
	}
	return got, want, download(b, want, q)
}

// sameWords fails the test at the first word of got (two bfloat16 values) that differs from want, with its
// row (perRow values a row) and both halves of each.
func sameWords(t *testing.T, what string, got, want []int32, perRow int) {
	t.Helper()
	for i := range want {
		if got[i] != want[i] {
			g, w := uint32(got[i]), uint32(want[i])
			t.Fatalf("word %d (row %d): %s %04x %04x, the element form %04x %04x", i, 2*i/perRow, what, g&0xffff, g>>16, w&0xffff, w>>16)
		}
	}
}
