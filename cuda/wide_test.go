package cuda

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/potato-k3/potato-k3/replay/ops"
)

// Sizes of a wave of 65,536 K3 tokens: the dense FFN of layer 0 is 33,792 wide (65,536 x 33,792 =
// 2,214,592,512 elements, just above 2^31), the routed experts are 3,072 wide with 16 chosen a token
// (1,048,576 gathered rows: 3.2e9 elements of SiTU, 3.8e9 of gathered latents) on a latent of 3,584.
const (
	wideTokens = 65536
	wideHidden = 7168
	wideFFN    = 33792
	wideLatent = 3584
	wideExpert = 3072
	wideK      = 16
)

// wideRows are the rows compared: the start, the middle, both sides of the cuBLASLt call boundary at
// this shape (63,548 rows), the first rows whose elements lie past 2^31 in a 33,792-wide tensor (63,550),
// and the end.
var wideRows = []int32{0, 1, 127, 128, 32767, 32768, 63547, 63548, 63550, 63551, 65408, 65534, 65535}

// TestWideTensors runs the ops that a 65,536-token wave makes larger than 2^31-1 elements (MatMul with a
// bfloat16 weight on cuBLASLt and on both tensor-core kernel versions, Gather, Slice, Add, Round,
// SiTUGLU, MulSigmoid, RMSNorm per row and per group, the grouped ExpertsAccumulate) and checks the rows
// of wideRows against the same rows computed in a small call: bit-identical, as batch invariance
// demands, so no index wrapped. Inputs are built on the device by Gather from small tables. Skipped
// with -short and when the device has less than 32 GiB free (the largest tensors are 8.9 GB).
func TestWideTensors(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: tensors of 8.9 GB")
	}
	b := testBackend(t, Options{Precision: ops.BF16, Sync: true})
	if free, total, err := b.MemInfo(); err != nil {
		t.Fatal(err)
	} else if free < 32<<30 {
		t.Skipf("device memory: %.1f GiB free of %.1f, the test needs 32", float64(free)/(1<<30), float64(total)/(1<<30))
	}
	w := &wide{t: t, b: b, rng: rand.New(rand.NewPCG(21, 22))}
	w.dense()
	w.experts()
}

// wide holds the state of TestWideTensors.
type wide struct {
	t   *testing.T
	b   *Backend
	rng *rand.Rand
}

// table uploads a rows x cols activation of random bfloat16 values.
func (w *wide) table(rows, cols int, scale float64) ops.Tensor {
	w.t.Helper()
	x, err := w.b.FromHost(rows, cols, fastFill(w.rng, rows*cols, scale))
	if err != nil {
		w.t.Fatal(err)
	}
	return x
}

// ids returns n random row indices below rows.
func (w *wide) ids(n, rows int) []int32 {
	v := make([]int32, n)
	for i := range v {
		v[i] = int32(w.rng.IntN(rows))
	}
	return v
}

// gather is Gather, failing the test on an error.
func (w *wide) gather(table ops.Tensor, ids []int32) ops.Tensor {
	w.t.Helper()
	x, err := w.b.Gather(table, ids)
	if err != nil {
		w.t.Fatal(err)
	}
	return x
}

// pick returns rows wideRows of x (read through Gather, itself indexing past 2^31) as float32.
func (w *wide) pick(x ops.Tensor) []float32 {
	w.t.Helper()
	g := w.gather(x, wideRows)
	defer w.b.Free(g)
	return w.host(g)
}

// host is ToHost, failing the test on an error.
func (w *wide) host(x ops.Tensor) []float32 {
	w.t.Helper()
	v, err := w.b.ToHost(x)
	if err != nil {
		w.t.Fatal(err)
	}
	return v
}

// same checks big's rows wideRows against small (whose rows are those rows, in order), then frees both.
func (w *wide) same(what string, big, small ops.Tensor, took time.Duration) {
	w.t.Helper()
	if big.Rows() != wideTokens {
		w.t.Fatalf("%s: %d rows, want %d", what, big.Rows(), wideTokens)
	}
	n := int64(big.Rows()) * int64(big.Cols())
	sameBits(w.t, fmt.Sprintf("%s (%dx%d = %d elements, %v): rows %v", what, big.Rows(), big.Cols(), n, took.Round(time.Millisecond), wideRows),
		w.pick(big), w.host(small), small.Cols())
	w.b.Free(big)
	w.b.Free(small)
}

// dense: MatMul, Gather, Slice, the elementwise ops and RMSNorm at 65,536 x 33,792.
func (w *wide) dense() {
	t, b := w.t, w.b
	const tableRows = 1024
	xTable := w.table(tableRows, wideHidden, 1)
	defer b.Free(xTable)
	xIDs := w.ids(wideTokens, tableRows)
	smallIDs := make([]int32, len(wideRows))
	for i, r := range wideRows {
		smallIDs[i] = xIDs[r]
	}
	x, xs := w.gather(xTable, xIDs), w.gather(xTable, smallIDs) // x[wideRows] == xs exactly
	defer b.Free(x)
	defer b.Free(xs)
	wt := bf16Weight(t, b, w.rng, wideFFN, wideHidden, 0.02)
	defer b.Free(wt)

	// Gather into a tensor past 2^31 elements
	gTable := w.table(256, wideFFN, 1)
	gIDs := w.ids(wideTokens, 256)
	smallG := make([]int32, len(wideRows))
	for i, r := range wideRows {
		smallG[i] = gIDs[r]
	}
	start := time.Now()
	g := w.gather(gTable, gIDs)
	w.same("Gather", g, w.gather(gTable, smallG), time.Since(start))
	b.Free(gTable)

	// MatMul on the backend's choice (cuBLASLt with the pinned algorithm when it has one)
	if b.lt != nil {
		if s := ltPlan(t, b, wideFFN, wideHidden); s.ok {
			t.Logf("%dx%d weight on cuBLASLt: %v; calls of at most %d rows", wideFFN, wideHidden, s.config, ltCallRows(wideFFN, wideHidden))
		} else {
			t.Logf("%dx%d weight: no pinned cuBLASLt algorithm (%s): MatMul runs the tensor-core kernel", wideFFN, wideHidden, s.why)
		}
	} else {
		t.Logf("no cuBLASLt (%s): MatMul runs the tensor-core kernel", b.info.CuBLASLtMissing)
	}
	start = time.Now()
	y, err := b.MatMul(x, wt)
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	ys, err := b.MatMul(xs, wt)
	if err != nil {
		t.Fatal(err)
	}
	sameBits(t, fmt.Sprintf("MatMul %dx%d by %dx%d (%v)", wideTokens, wideHidden, wideFFN, wideHidden, took.Round(time.Millisecond)),
		w.pick(y), w.host(ys), wideFFN)
	defer b.Free(y)
	defer b.Free(ys)

	// the tensor-core kernel, versions 2 and 3, on the same operands
	xt, xst := x.(*Tensor), xs.(*Tensor)
	for _, kern := range []string{"k_matmul_tc_bf16", "k_matmul_tc_bf16_vec"} {
		var big, small *Tensor
		start := time.Now()
		err := b.run("test "+kern, func(c *opCtx) error {
			var err error
			if big, err = c.out(wideTokens, wideFFN); err != nil {
				return err
			}
			if err := c.gemmKernel(kern, tcTile, big.ptr, xt.ptr, wideTokens, weightOf(wt.(*Tensor)), 1); err != nil {
				return err
			}
			if small, err = c.out(len(wideRows), wideFFN); err != nil {
				return err
			}
			return c.gemmKernel(kern, tcTile, small.ptr, xst.ptr, len(wideRows), weightOf(wt.(*Tensor)), 1)
		})
		if err != nil {
			t.Fatal(err)
		}
		w.same("MatMul on "+kern, big, small, time.Since(start))
	}

	// elementwise ops, Slice and RMSNorm over y
	nw1 := w.table(1, wideFFN, 1)
	nw2 := w.table(1, 128, 1)
	defer b.Free(nw1)
	defer b.Free(nw2)
	for _, op := range []struct {
		what string
		fn   func(x ops.Tensor) (ops.Tensor, error)
	}{
		{"Add", func(x ops.Tensor) (ops.Tensor, error) { return b.Add(x, x) }},
		{"Round", b.Round},
		{"SiTUGLU", func(x ops.Tensor) (ops.Tensor, error) { return b.SiTUGLU(x, x, 4, 25) }},
		{"MulSigmoid", func(x ops.Tensor) (ops.Tensor, error) { return b.MulSigmoid(x, x) }},
		{"Slice [100, 33792)", func(x ops.Tensor) (ops.Tensor, error) { return b.Slice(x, 100, wideFFN) }},
		{"RMSNorm per row", func(x ops.Tensor) (ops.Tensor, error) { return b.RMSNorm(x, nw1, 1e-6) }},
		{"RMSNorm per group of 128", func(x ops.Tensor) (ops.Tensor, error) { return b.RMSNorm(x, nw2, 1e-6) }},
	} {
		start := time.Now()
		big, err := op.fn(y)
		if err != nil {
			t.Fatalf("%s: %v", op.what, err)
		}
		took := time.Since(start)
		small, err := op.fn(ys)
		if err != nil {
			t.Fatalf("%s (small): %v", op.what, err)
		}
		w.same(op.what, big, small, took)
	}
}

// experts: the grouped ExpertsAccumulate of 65,536 tokens choosing all 16 experts (1,048,576 gathered
// rows) against the same call on the rows of wideRows.
func (w *wide) experts() {
	t, b := w.t, w.b
	const tableRows = 1024
	es := make([]ops.Expert, wideK)
	pool := make([]byte, 3*wideExpert*wideLatent/2+wideK*4099)
	for i := 0; i+8 <= len(pool); i += 8 {
		v := w.rng.Uint64()
		for j := range 8 {
			pool[i+j] = byte(v >> (8 * j))
		}
	}
	mat := wideExpert * wideLatent / 2
	for i := range es {
		p := pool[i*4099:] // each expert its own codes: a different window of the pool
		var sc [3][]byte
		for j := range sc {
			sc[j] = make([]byte, wideExpert*wideLatent/32)
			for q := range sc[j] {
				sc[j][q] = byte(118 + w.rng.IntN(4))
			}
		}
		e, err := b.UploadExpert(i, wideLatent, wideExpert, p[:mat], sc[0], p[mat:2*mat], sc[1], p[2*mat:3*mat], sc[2])
		if err != nil {
			t.Fatal(err)
		}
		es[i] = e
	}
	defer func() {
		for _, e := range es {
			b.Free(e)
		}
	}()
	zTable, accTable := w.table(tableRows, wideLatent, 1), w.table(tableRows, wideLatent, 0.1)
	defer b.Free(zTable)
	defer b.Free(accTable)
	zIDs, accIDs := w.ids(wideTokens, tableRows), w.ids(wideTokens, tableRows)
	rt := ops.Routing{K: wideK, IDs: make([]int32, wideTokens*wideK), Weights: make([]float32, wideTokens*wideK)}
	for r := range wideTokens {
		for j, e := range w.rng.Perm(wideK) {
			rt.IDs[r*wideK+j] = int32(e)
			rt.Weights[r*wideK+j] = float32(0.05 + 0.9*w.rng.Float64())
		}
	}
	small := ops.Routing{K: wideK}
	smallZ, smallAcc := make([]int32, len(wideRows)), make([]int32, len(wideRows))
	for i, r := range wideRows {
		smallZ[i], smallAcc[i] = zIDs[r], accIDs[r]
		small.IDs = append(small.IDs, rt.IDs[int(r)*wideK:int(r+1)*wideK]...)
		small.Weights = append(small.Weights, rt.Weights[int(r)*wideK:int(r+1)*wideK]...)
	}
	z, acc := w.gather(zTable, zIDs), w.gather(accTable, accIDs)
	zs, accs := w.gather(zTable, smallZ), w.gather(accTable, smallAcc)
	defer b.Free(z)
	defer b.Free(zs)
	start := time.Now()
	if err := b.expertsAccumulate(acc, z, rt, es, 4, 25, expertsGrouped); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	if err := b.expertsAccumulate(accs, zs, small, es, 4, 25, expertsGrouped); err != nil {
		t.Fatal(err)
	}
	w.same(fmt.Sprintf("ExpertsAccumulate, grouped (%d experts, %d gathered rows: %d SiTU elements)", wideK, wideTokens*wideK, wideTokens*wideK*wideExpert),
		acc, accs, took)
}

// TestWideLimits checks the size rules without a GPU: checkDims admits K3's widest wave tensors and up to
// 2^34 elements, refuses more and refuses 2^31 rows or columns; every cuBLASLt call stays within 2^31-1
// elements an operand and starts 16-byte aligned; launch refuses grids past the device's limits before
// calling the driver.
func TestWideLimits(t *testing.T) {
	for _, c := range []struct {
		rows, cols int
		ok         bool
	}{
		{wideTokens, wideFFN, true}, {wideTokens * wideK, wideExpert, true}, {1 << 17, 1 << 17, true},
		{1<<17 + 1, 1 << 17, false}, {1 << 31, 1, false}, {1, 1 << 31, false}, {1<<31 - 1, 8, true},
		{-1, 5, false}, {0, 1 << 40, false},
	} {
		if err := checkDims("test", c.rows, c.cols); (err == nil) != c.ok {
			t.Errorf("checkDims(%d, %d): %v, want ok %v", c.rows, c.cols, err, c.ok)
		}
	}
	for _, s := range [][2]int{{wideFFN, wideHidden}, {12288, 7168}, {163840, 7168}, {131, 1001}, {1, 7}, {1 << 30, 8}} {
		m, k := s[0], s[1]
		n := ltCallRows(m, k)
		if int64(n)*int64(max(m, (k+7)&^7)) > ltMaxCallElements || (n >= 4 && n%4 != 0) {
			t.Errorf("ltCallRows(%d, %d) = %d: an operand past 2^31-1 elements or not a multiple of 4", m, k, n)
		}
	}
	if n := ltCallRows(wideFFN, wideHidden); n != 63548 {
		t.Errorf("ltCallRows(%d, %d) = %d, want 63548 (wideRows straddles it)", wideFFN, wideHidden, n)
	}
	c := &opCtx{b: &Backend{}, op: "test"} // the grid is checked before the kernel is looked up
	for _, g := range []dim3{d1(1 << 31), d2(1, 65536), {1, 1, 65536}, d1(-1)} {
		if err := c.launch("k", g, d1(256), 0); !errors.Is(err, ErrShape) {
			t.Errorf("launch with grid %v: %v, want an ErrShape error", g, err)
		}
	}
}
