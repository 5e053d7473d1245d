package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/potato-k3/potato-k3/replay/bf16"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// route.cu's warp-a-row top-k (k_route_topk_v2) against its thread-a-row kernel (k_route_topk, the
// general one), and kda.cu's k_shortconv4 against k_shortconv, bit for bit, on shapes with tails (rows 1,
// 63, 64, 65, 129, 65,536), exact ties, NaN and infinities. The general kernels equal the CPU backend
// (TestAgainstCPU); k_route_topk is also checked here against the CPU backend's insertion top-k
// (routeRef) on the sigmoids it leaves in the logits.

// routeRef is replay/cpu's routeRows on one row of sigmoids s: v = s + bias, the insertion top-k, the sum
// in selection order and the weights, in float32.
func routeRef(s, bias []float32, ids []int32, ws []float32, scale float32) {
	k, n := len(ids), 0
	v := make([]float32, len(s))
	for e := range s {
		v[e] = s[e] + bias[e]
	}
	for i, x := range v {
		if n == k && !(x > v[ids[k-1]]) {
			continue
		}
		p := n
		for p > 0 && x > v[ids[p-1]] {
			p--
		}
		if n < k {
			n++
		}
		copy(ids[p+1:n], ids[p:n-1])
		ids[p] = int32(i)
	}
	var sum float32
	for _, e := range ids {
		sum += s[e]
	}
	for j, e := range ids {
		ws[j] = (s[e] / (sum + 1e-20)) * scale
	}
}

// routeData returns rows x experts logits and a bias of the given kind.
func routeData(rng *rand.Rand, kind string, rows, experts int) (logits, bias []float32) {
	logits, bias = make([]float32, rows*experts), make([]float32, experts)
	for i := range logits {
		logits[i] = float32(2 * rng.NormFloat64())
	}
	for e := range bias {
		bias[e] = float32(0.05 * rng.NormFloat64())
	}
	nan := float32(math.NaN())
	switch kind {
	case "ties": // few distinct values: many exact ties of s + bias, decided by the id
		for i := range logits {
			logits[i] = []float32{-1, 0, 0.5, 1}[rng.IntN(4)]
		}
		for e := range bias {
			bias[e] = []float32{0, 0.25, 0.5}[rng.IntN(3)]
		}
	case "ascending": // every expert beats the ones before: the most insertions for version 1
		for r := range rows {
			for e := range experts {
				logits[r*experts+e] = float32(e-experts/2) / float32(experts)
			}
		}
		clear(bias)
	case "nan": // NaN logits in some rows (one, several, or at the first expert), infinities in others
		for r := range rows {
			row := logits[r*experts : (r+1)*experts]
			switch r % 6 {
			case 1:
				row[rng.IntN(experts)] = nan
			case 2:
				for range 3 {
					row[rng.IntN(experts)] = nan
				}
			case 3:
				row[0] = nan
			case 4:
				row[rng.IntN(experts)] = float32(math.Inf(1))
				row[rng.IntN(experts)] = float32(math.Inf(-1))
			}
		}
	case "nanbias": // a NaN bias: every row has a NaN score; +inf and -inf biases
		bias[experts/3] = nan
		bias[experts/2] = float32(math.Inf(1))
		bias[experts-1] = float32(math.Inf(-1))
	}
	return logits, bias
}

// routeOnDevice runs route.cu's version on logits and returns the ids, weights and the logits afterwards.
func routeOnDevice(b *Backend, version int, logits, bias []float32, rows, experts, k int, scale float32) (ids []int32, ws, after []float32, err error) {
	ids, ws, after = make([]int32, rows*k), make([]float32, rows*k), make([]float32, rows*experts)
	err = b.run("route test", func(c *opCtx) error {
		lp, err := uploadTemp(c, logits)
		if err != nil {
			return err
		}
		bp, err := uploadTemp(c, bias)
		if err != nil {
			return err
		}
		ip, err := c.temp(4 * rows * k)
		if err != nil {
			return err
		}
		wp, err := c.temp(4 * rows * k)
		if err != nil {
			return err
		}
		if err := c.routeTopK(version, ip, wp, lp, bp, rows, experts, k, scale); err != nil {
			return err
		}
		if err := download(b, ids, ip); err != nil {
			return err
		}
		if err := download(b, ws, wp); err != nil {
			return err
		}
		return download(b, after, lp)
	})
	return ids, ws, after, err
}

// TestRouteTopKBits: k_route_topk_v2 gives version 1's ids and weights bit for bit, and version 1 the CPU
// backend's selection on its sigmoids.
func TestRouteTopKBits(t *testing.T) {
	b := testBackend(t, Options{Precision: ops.BF16, Sync: true})
	rng := rand.New(rand.NewPCG(3, 4))
	const scale = 2.5
	type shape struct{ experts, k int }
	for _, sh := range []shape{{896, 16}, {48, 6}, {40, 40}, {1000, 33}} {
		rowsList := []int{1, 63, 64, 65, 129, 65536}
		if sh.experts != 896 && sh.experts != 48 {
			rowsList = []int{1, 65, 129}
		}
		for _, rows := range rowsList {
			for _, kind := range []string{"normal", "ties", "ascending", "nan", "nanbias"} {
				name := fmt.Sprintf("%d rows x %d experts, k %d, %s", rows, sh.experts, sh.k, kind)
				logits, bias := routeData(rng, kind, rows, sh.experts)
				id1, w1, s1, err := routeOnDevice(b, 1, logits, bias, rows, sh.experts, sh.k, scale)
				if err != nil {
					t.Fatalf("%s: version 1: %v", name, err)
				}
				id2, w2, after, err := routeOnDevice(b, 2, logits, bias, rows, sh.experts, sh.k, scale)
				if err != nil {
					t.Fatalf("%s: version 2: %v", name, err)
				}
				checkRouteSame(t, name+": v2 vs v1", id2, w2, id1, w1, sh.k, false)
				sameBitsQuiet(t, name+": v2 leaves the logits", after, logits, sh.experts)
				idr, wr := make([]int32, rows*sh.k), make([]float32, rows*sh.k)
				for r := range rows {
					routeRef(s1[r*sh.experts:(r+1)*sh.experts], bias, idr[r*sh.k:(r+1)*sh.k], wr[r*sh.k:(r+1)*sh.k], scale)
				}
				checkRouteSame(t, name+": v1 vs the CPU backend's statements", id1, w1, idr, wr, sh.k, true)
			}
		}
	}
}

// checkRouteSame reports ids that differ and weights whose bits differ. With anyNaN a NaN weight equals
// any NaN: Go's float32 arithmetic on the host keeps an operand's NaN bits where the GPU writes its
// canonical NaN (the H200 run showed the two patterns differ in the rows whose weights are all NaN, ids
// equal), so the host reference can check that a weight is NaN, not which NaN; the two kernel versions
// run the same instructions and are held to equal bits.
func checkRouteSame(t *testing.T, what string, gotIDs []int32, gotW []float32, wantIDs []int32, wantW []float32, k int, anyNaN bool) {
	t.Helper()
	n, first := 0, ""
	for i := range wantIDs {
		sameW := math.Float32bits(gotW[i]) == math.Float32bits(wantW[i])
		if anyNaN && math.IsNaN(float64(gotW[i])) && math.IsNaN(float64(wantW[i])) {
			sameW = true
		}
		if gotIDs[i] != wantIDs[i] || !sameW {
			if n == 0 {
				r := i / k
				first = fmt.Sprintf("row %d: ids %v weights %v, want %v %v", r, gotIDs[r*k:(r+1)*k], gotW[r*k:(r+1)*k],
					wantIDs[r*k:(r+1)*k], wantW[r*k:(r+1)*k])
			}
			n++
		}
	}
	if n > 0 {
		t.Errorf("%s: %d of %d (id, weight) pairs differ; first %s", what, n, len(wantIDs), first)
	}
}

// shortConvKernel launches k_shortconv, the kernel of any shape (general), or what ShortConvSiLU launches
// for the shape (c.shortConv: k_shortconv4 where it fits).
func shortConvKernel(c *opCtx, form convForm, out, x, w, start uint64, rows, ch, taps int, bf int32) error {
	switch form {
	case convGeneral:
		return c.launch1D("k_shortconv", rows*ch, out, x, w, start, int64(rows), int32(ch), int32(taps), bf)
	case convNarrowOnly: // the bfloat16 copy alone, widened into out
		nb, err := c.temp(2 * rows * ch)
		if err != nil {
			return err
		}
		if err := c.launch("k_shortconv4n", shortConv4Grid(rows, ch), d1(ewThreads), 0,
			uint64(0), x, w, start, int64(rows), int32(ch), bf, nb); err != nil {
			return err
		}
		return c.launch1D("k_widen_bf16", rows*ch, out, nb, int64(rows*ch))
	}
	return c.shortConv(out, x, w, start, rows, ch, taps, bf)
}

// convForm is a short convolution kernel's form in the tests: k_shortconv, the launcher's choice
// (k_shortconv4 where it fits), or k_shortconv4n's bfloat16 copy alone.
type convForm int

const (
	convGeneral convForm = iota
	convLauncher
	convNarrowOnly
)

// shortConvOnDevice runs shortConvKernel and returns the output.
func shortConvOnDevice(b *Backend, form convForm, x, w []float32, start []int32, rows, ch, taps int, bf int32) ([]float32, error) {
	out := make([]float32, rows*ch)
	err := b.run("shortconv test", func(c *opCtx) error {
		xp, err := uploadTemp(c, x)
		if err != nil {
			return err
		}
		wp, err := uploadTemp(c, w)
		if err != nil {
			return err
		}
		sp, err := uploadTemp(c, start)
		if err != nil {
			return err
		}
		op, err := c.temp(4 * rows * ch)
		if err != nil {
			return err
		}
		if err := shortConvKernel(c, form, op, xp, wp, sp, rows, ch, taps, bf); err != nil {
			return err
		}
		return download(b, out, op)
	})
	return out, err
}

// rowStarts is ShortConvSiLU's table: the first row of each row's sequence.
func rowStarts(lens []int) []int32 {
	var s []int32
	r := 0
	for _, l := range lens {
		for range l {
			s = append(s, int32(r))
		}
		r += l
	}
	return s
}

// TestShortConvBits: k_shortconv4 gives k_shortconv's bits (which are the CPU backend's), in both
// precisions, over sequences of 1 row and longer, channel counts with a partial block, NaN and inf
// inputs; 3 taps run k_shortconv through the same launcher.
func TestShortConvBits(t *testing.T) {
	b := testBackend(t, Options{Precision: ops.BF16, Sync: true})
	rng := rand.New(rand.NewPCG(5, 6))
	seq4096 := make([]int, 16)
	for i := range seq4096 {
		seq4096[i] = 4096
	}
	for _, c := range []struct {
		ch, taps int
		lens     []int
	}{
		{48, 4, []int{1}},
		{48, 4, []int{63}},
		{48, 4, []int{1, 1, 62}},
		{12288, 4, []int{30, 35}},
		{4, 4, []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 74}},
		{12292, 4, []int{129}}, // 3,073 channel quads: a partial block
		{1028, 4, []int{2, 500, 1, 3, 494}},
		{48, 4, seq4096},
		{48, 3, []int{1, 64}},
	} {
		rows := 0
		for _, l := range c.lens {
			rows += l
		}
		x, w := make([]float32, rows*c.ch), make([]float32, c.ch*c.taps)
		for i := range x {
			x[i] = float32(rng.NormFloat64())
			if rng.IntN(997) == 0 {
				x[i] = []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))}[rng.IntN(3)]
			}
		}
		for i := range w {
			w[i] = float32(0.5 * rng.NormFloat64())
		}
		start := rowStarts(c.lens)
		for _, bf := range []int32{0, 1} {
			name := fmt.Sprintf("%d rows x %d channels, %d taps, %d sequences, bf %d", rows, c.ch, c.taps, len(c.lens), bf)
			want, err := shortConvOnDevice(b, convGeneral, x, w, start, rows, c.ch, c.taps, bf)
			if err != nil {
				t.Fatalf("%s: k_shortconv: %v", name, err)
			}
			got, err := shortConvOnDevice(b, convLauncher, x, w, start, rows, c.ch, c.taps, bf)
			if err != nil {
				t.Fatalf("%s: ShortConvSiLU's kernel: %v", name, err)
			}
			sameBitsQuiet(t, name, got, want, c.ch)
			if bf == 0 || c.taps != 4 || c.ch%4 != 0 {
				continue // k_shortconv4n: BF16 precision, k_shortconv4's shapes
			}
			got, err = shortConvOnDevice(b, convNarrowOnly, x, w, start, rows, c.ch, c.taps, bf)
			if err != nil {
				t.Fatalf("%s: k_shortconv4n: %v", name, err)
			}
			sameBitsQuiet(t, name+", the bfloat16 copy of k_shortconv4n", got, want, c.ch)
		}
	}
}

// sameBitsQuiet is sameBits without the log line on success.
func sameBitsQuiet(t *testing.T, what string, got, want []float32, cols int) {
	t.Helper()
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			sameBits(t, what, got, want, cols)
			return
		}
	}
}

// TestRouteChunks: Route over more rows than one chunk of routeChunk (every chunk's choices stay on the
// device and come to the host once) gives, row for row, what Route gives each part of the rows alone
// (parts within one chunk), in both precisions: the chunks write their own rows of the device tables.
func TestRouteChunks(t *testing.T) {
	for _, prec := range []ops.Precision{ops.BF16, ops.FP32} {
		b := testBackend(t, Options{Precision: prec})
		rng := rand.New(rand.NewPCG(31, 32))
		const rows, cols, experts, k = 2*routeChunk + 1001, 64, 40, 6
		xv, wv, bv := make([]float32, rows*cols), make([]float32, experts*cols), make([]float32, experts)
		for _, v := range [][]float32{xv, wv, bv} {
			for i := range v {
				v[i] = bf16.Round(float32(0.3 * rng.NormFloat64()))
			}
		}
		up := func(r, c int, v []float32) ops.Tensor {
			x, err := b.FromHost(r, c, v)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { b.Free(x) })
			return x
		}
		w, bias := up(experts, cols, wv), up(1, experts, bv)
		whole, err := b.Route(up(rows, cols, xv), w, bias, k, 2.5)
		if err != nil {
			t.Fatal(err)
		}
		for r0 := 0; r0 < rows; r0 += 7000 {
			n := min(7000, rows-r0)
			part, err := b.Route(up(n, cols, xv[r0*cols:(r0+n)*cols]), w, bias, k, 2.5)
			if err != nil {
				t.Fatal(err)
			}
			for i := range n * k {
				g, p := r0*k+i, i
				if whole.IDs[g] != part.IDs[p] || math.Float32bits(whole.Weights[g]) != math.Float32bits(part.Weights[p]) {
					t.Fatalf("%v: row %d choice %d: whole (%d, %g), the part of rows %d.. alone (%d, %g)",
						prec, g/k, g%k, whole.IDs[g], whole.Weights[g], r0, part.IDs[p], part.Weights[p])
				}
			}
		}
	}
}

// TestShortConvNarrowOnly: in BF16 precision with the tensor cores, ShortConvSiLU's output is narrow-only
// (convNarrow: the bfloat16 copy the chunked KDA kernel reads), whole and in slices, where the first rows
// of a continued sequence are written again into the copy (copyRows); its values are those of
// Options.EagerWidening, which writes the float32 values too, in both forms; and so with x narrow-only
// (MatMulNarrow's output), read from its copy in place (k_shortconv4b; the carried inputs stay narrow).
func TestShortConvNarrowOnly(t *testing.T) {
	narrowB := testBackend(t, Options{Precision: ops.BF16})
	if !narrowB.convNarrow() {
		t.Skip("no narrow-only convolution outputs on this device")
	}
	eager := testBackend(t, Options{Precision: ops.BF16, EagerWidening: true})
	const ch, taps = 48, 4
	l := ops.Layout{Starts: []int{0, 5, 40, 41, 90}}
	rng := rand.New(rand.NewPCG(8, 9))
	xv, wv := make([]float32, l.Tokens()*ch), make([]float32, ch*taps)
	for i := range xv {
		xv[i] = float32(rng.NormFloat64())
	}
	for i := range wv {
		wv[i] = float32(0.5 * rng.NormFloat64())
	}
	// narrowX: x, and each slice's x, narrow-only (a projection's output from MatMulNarrow), read by
	// k_shortconv4b from the copy
	narrowX := false
	input := func(b *Backend, rows int, v []float32) ops.Tensor {
		x, err := b.FromHost(rows, ch, v)
		if err != nil {
			t.Fatal(err)
		}
		if !narrowX {
			return x
		}
		y := narrowOnlyCopy(t, b, x)
		b.Free(x)
		return y
	}
	run := func(b *Backend, slice int) ([]float32, []bool) {
		x := input(b, l.Tokens(), xv)
		defer b.Free(x)
		w, err := b.FromHost(ch, taps, wv)
		if err != nil {
			t.Fatal(err)
		}
		defer b.Free(w)
		if slice == 0 {
			y, err := b.ShortConvSiLU(x, w, l)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Free(y)
			only := y.(*Tensor).narrowOnly
			h, err := b.ToHost(y)
			if err != nil {
				t.Fatal(err)
			}
			return h, []bool{only}
		}
		var only []bool
		out := runSliced(t, b, l, slice, func(j, lo, hi int, sl ops.SliceLayout, c ops.Carry) (ops.Tensor, ops.Carry, error) {
			xs := input(b, hi-lo, xv[lo*ch:hi*ch])
			y, next, err := b.ShortConvSiLUSlice(xs, w, sl, c)
			if narrowX && !xs.(*Tensor).narrowOnly {
				t.Errorf("slices of %d: slice %d: the narrow-only input was widened", slice, j)
			}
			b.Free(xs)
			if err == nil {
				only = append(only, y.(*Tensor).narrowOnly)
			}
			return y, next, err
		})
		return out, only
	}
	want, _ := run(eager, 0)
	for _, narrowX = range []bool{false, true} {
		for _, slice := range []int{0, 1, 2, 3, 7, 30} {
			for _, b := range []*Backend{narrowB, eager} {
				got, only := run(b, slice)
				name := fmt.Sprintf("slices of %d, eager widening %v, narrow-only x %v", slice, b == eager, narrowX)
				sameBitsQuiet(t, name, got, want, ch)
				for j, o := range only {
					if o != (b == narrowB) {
						t.Errorf("%s: output %d narrow-only %v", name, j, o)
					}
				}
			}
		}
	}
}
