package cuda

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/potato-k3/potato-k3/replay/ops"
)

// TestUploadTiming (timing; not with -short): the rate of the weight stream from stable pinned host
// memory at K3's sizes, the way the engine's host cache feeds it: a layer's 896 experts (15.7 GB) in
// batches of 16 that share a host buffer (one span copy each), alone, while the compute stream runs
// matmuls, and while the routed experts' path runs on one stream or on lanes; and one plain copy of a large pinned buffer for reference. The bound of the benchmark assumes
// 55 GB/s; a MoE layer at 16,384 tokens takes longer than its copies at that rate, and this says whether
// the copies themselves are slower.
func TestUploadTiming(t *testing.T) {
	skipTiming(t)
	b := testBackend(t, Options{Precision: ops.BF16})
	const latent, ffn, perBuf, bufs = 3584, 3072, 16, 56
	rng := rand.New(rand.NewPCG(3, 4))
	parts := randExpertBytes(rng, latent, ffn)
	for i := 1; i < 6; i += 2 { // ordinary scales only
		for j := range parts[i] {
			parts[i][j] = byte(118 + j%4)
		}
	}
	size := 0
	for _, p := range parts {
		size += len(p)
	}
	start := time.Now()
	var batches [][]ops.ExpertParts
	var first []byte // the first host buffer, for the plain copies at the end
	for bi := range bufs {
		buf, err := b.AllocHost(perBuf * size)
		if err != nil {
			t.Fatalf("pinned buffer %d of %d bytes: %v", bi, perBuf*size, err)
		}
		if first == nil {
			first = buf
		}
		var batch []ops.ExpertParts
		off := 0
		for e := range perBuf {
			var dst [6][]byte
			for j, p := range parts {
				dst[j] = buf[off : off+len(p) : off+len(p)]
				copy(dst[j], p)
				off += len(p)
			}
			batch = append(batch, ops.ExpertParts{ID: bi*perBuf + e, W1Packed: dst[0], W1Scale: dst[1], W3Packed: dst[2],
				W3Scale: dst[3], W2Packed: dst[4], W2Scale: dst[5]})
		}
		if err := b.MarkStable(buf); err != nil {
			t.Fatal(err)
		}
		batches = append(batches, batch)
	}
	total := float64(bufs * perBuf * size)
	t.Logf("pinned and filled %.2f GB of host memory in %v", total/1e9, time.Since(start).Round(time.Millisecond))

	// the compute load: matmuls of 16,384 rows by a 12288 x 7168 weight (about 5 ms each on cuBLASLt)
	x, err := b.FromHost(16384, 7168, make([]float32, 16384*7168))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free(x)
	w := bf16Weight(t, b, rng, 12288, 7168, 0.01)
	defer b.Free(w)
	load := func(n int) {
		for range n {
			y, err := b.MatMul(x, w)
			if err != nil {
				t.Fatal(err)
			}
			b.Free(y)
		}
	}
	// the other compute load: the routed experts' path, 128 resident experts and 9,600 tokens choosing 16
	// of them (about 1,200 rows an expert, a 65,536-token wave's), its GEMMs on one stream or on lanes
	var resident []ops.Expert
	for id := range 128 {
		e, err := b.UploadExpert(1000+id, latent, ffn, parts[0], parts[1], parts[2], parts[3], parts[4], parts[5])
		if err != nil {
			t.Fatal(err)
		}
		resident = append(resident, e)
	}
	defer func() {
		for _, e := range resident {
			b.Free(e)
		}
	}()
	const erows, ek = 9600, 16
	rt := randRouting(rng, erows, ek, len(resident), 1000)
	zv := make([]float32, erows*latent)
	for i := range zv {
		zv[i] = float32(rng.NormFloat64())
	}
	z, err := b.FromHost(erows, latent, zv)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free(z)
	acc, err := b.Zeros(erows, latent)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free(acc)
	loadExperts := func(n, lanes int) {
		b.opts.ExpertStreams = lanes
		defer func() { b.opts.ExpertStreams = 0 }()
		for range n {
			if err := b.ExpertsAccumulate(acc, z, rt, resident, 4, 25); err != nil {
				t.Fatal(err)
			}
		}
	}
	syncCopy := func() {
		if err := b.ex.Do(b.dv.SyncCopy); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		what             string
		matmuls, experts int // matmuls, or expert calls on `lanes` streams, queued before the uploads
		lanes            int
	}{{"alone", 0, 0, 0}, {"alone", 0, 0, 0}, {"beside 60 matmuls", 60, 0, 0}, {"beside 60 matmuls", 60, 0, 0},
		{"beside experts, 1 lane", 0, 10, 1}, {"beside experts, 4 lanes", 0, 10, 4},
		{"beside experts, 1 lane", 0, 10, 1}, {"beside experts, 4 lanes", 0, 10, 4}} {
		if err := b.Synchronize(); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		load(c.matmuls)
		loadExperts(c.experts, c.lanes)
		loaded := time.Since(start)
		var es []ops.Expert
		for _, batch := range batches {
			xs, err := b.UploadExperts(latent, ffn, batch)
			if err != nil {
				t.Fatal(err)
			}
			es = append(es, xs...)
		}
		queued := time.Since(start)
		syncCopy()
		copied := time.Since(start)
		if err := b.Synchronize(); err != nil {
			t.Fatal(err)
		}
		computed := time.Since(start)
		t.Logf("TIMING upload of 896 experts %-24s %.2f GB: copies done at %7.1f ms (%.1f GB/s); matmuls queued by %.1f ms, uploads queued by %.1f ms, compute done at %.1f ms",
			c.what, total/1e9, ms(copied), total/copied.Seconds()/1e9, ms(loaded), ms(queued), ms(computed))
		for _, e := range es {
			b.Free(e)
		}
	}

	// one plain copy of a pinned buffer (the first 16 experts' host buffer, 280 MB) into one device
	// buffer, repeated: the copy engine's rate for large copies
	src := first
	var dev uint64
	if err := b.ex.Do(func() error {
		var err error
		dev, err = b.dv.MallocCopy(len(src))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	const reps = 20
	start = time.Now()
	if err := b.ex.Do(func() error {
		for range reps {
			if err := b.dv.CopyAsync(dev, src); err != nil {
				return err
			}
		}
		return b.dv.SyncCopy()
	}); err != nil {
		t.Fatal(err)
	}
	el := time.Since(start)
	t.Logf("TIMING plain copies: %d x %.0f MB from pinned memory in %.1f ms: %.1f GB/s", reps, float64(len(src))/1e6, ms(el), float64(reps*len(src))/el.Seconds()/1e9)
	if err := b.ex.Do(func() error { return b.dv.Free(dev) }); err != nil {
		t.Fatal(err)
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1e3 }
