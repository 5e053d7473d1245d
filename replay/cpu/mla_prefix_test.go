package cpu_test

import (
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"

	"github.com/potato-k3/potato-k3/replay/cpu"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// TestMLAPrefixBytes holds the CPU backend to what it tells the planner (ops.PrefixSizer): a slice that
// continues a long sequence allocates no more than MLAPrefixBytes beyond its output, far less than every
// head's keys and values of the prefix, and answers with the unsliced op's bits.
func TestMLAPrefixBytes(t *testing.T) {
	const (
		heads, nope, shared, vdim, lora = 4, 16, 8, 12, 32
		pre, n, threads                 = 4000, 64, 4
	)
	b := cpu.New(cpu.Options{Threads: threads})
	rng := rand.New(rand.NewPCG(1, 2))
	tensor := func(rows, cols int) ops.Tensor {
		d := make([]float32, rows*cols)
		for i := range d {
			d[i] = float32(rng.NormFloat64())
		}
		x, err := b.FromHost(rows, cols, d)
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	rows := pre + n
	q, ks, lat := tensor(rows, heads*(nope+shared)), tensor(rows, shared), tensor(rows, lora)
	kvb := tensor(heads*(nope+vdim), lora)
	kv, err := b.MatMul(lat, kvb)
	if err != nil {
		t.Fatal(err)
	}
	part := func(x ops.Tensor, lo, hi int) ops.Tensor {
		h, err := b.ToHost(x)
		if err != nil {
			t.Fatal(err)
		}
		p, err := b.FromHost(hi-lo, x.Cols(), h[lo*x.Cols():hi*x.Cols()])
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	slice := func(lo, hi int) []ops.Tensor {
		return []ops.Tensor{part(q, lo, hi), part(kv, lo, hi), part(ks, lo, hi), part(lat, lo, hi)}
	}
	first := slice(0, pre)
	_, carry, err := b.MLASlice(first[0], first[1], first[2], first[3], kvb, heads, nope, shared, vdim,
		ops.SliceLayout{Layout: ops.Layout{Starts: []int{0, pre}}, Open: true}, nil)
	if err != nil || carry == nil {
		t.Fatalf("first slice: carry %v, %v", carry, err)
	}
	second := slice(pre, rows)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	out, _, err := b.MLASlice(second[0], second[1], second[2], second[3], kvb, heads, nope, shared, vdim,
		ops.SliceLayout{Layout: ops.Layout{Starts: []int{0, n}}, Offset: pre}, carry)
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	fixed, perRow := b.MLAPrefixBytes(pre, heads, nope, shared, vdim, lora)
	planned := fixed + perRow*n
	held := int64(after.TotalAlloc-before.TotalAlloc) - 4*int64(n*heads*vdim) // less the output
	const slack = 64 << 10                                                    // goroutines, task lists, headers
	if held > planned+slack || held < planned/2 {
		t.Errorf("the second slice allocated %d bytes beyond its output; MLAPrefixBytes plans %d (fixed %d, %d a row)", held, planned, fixed, perRow)
	}
	t.Logf("held %d bytes beyond the output; planned %d", held, planned)
	if all := 4 * int64(pre) * heads * (nope + vdim); planned >= all/2 {
		t.Errorf("MLAPrefixBytes plans %d bytes: not far below every head's keys and values of the prefix (%d)", planned, all)
	}
	whole, err := b.MLA(q, kv, ks, heads, nope, shared, vdim, ops.Layout{Starts: []int{0, rows}})
	if err != nil {
		t.Fatal(err)
	}
	got, err := b.ToHost(out)
	if err != nil {
		t.Fatal(err)
	}
	want, err := b.ToHost(whole)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want[pre*heads*vdim:]) {
		t.Error("the continued slice's rows differ from the unsliced op's")
	}
}
