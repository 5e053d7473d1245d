package model

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/potato-k3/potato-k3/replay/cpu"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// TestPools: an expert-major layer's slices are cut into pools of consecutive slices that cover every
// slice once, in order; a pool of several slices keeps each chunk's call within PoolBytes, and no pool
// could take the next slice without passing it; a budget of zero leaves a slice a pool.
func TestPools(t *testing.T) {
	const experts, k = 32, 4
	m := &Model{Ops: cpu.New(cpu.Options{}), Dims: Dims{Latent: 48, ExpertFFN: 40, TopK: k, Experts: experts}}
	rng := rand.New(rand.NewPCG(5, 9))
	sizes := []int{7, 1, 30, 12, 12, 5, 64, 3, 9, 20}
	bounds := []int{0}
	var routings []ops.Routing
	for _, n := range sizes {
		bounds = append(bounds, bounds[len(bounds)-1]+n)
		r := ops.Routing{K: k, IDs: make([]int32, n*k), Weights: make([]float32, n*k)}
		for i := range r.IDs {
			// skewed, so that chunks differ in their pairs
			r.IDs[i] = int32(min(rng.IntN(experts), rng.IntN(experts)))
			r.Weights[i] = rng.Float32()
		}
		routings = append(routings, r)
	}
	wr := newWaveRouting(bounds[len(bounds)-1], k, experts, len(sizes))
	for j, r := range routings {
		if err := wr.put(j, bounds[j], r); err != nil {
			t.Fatal(err)
		}
	}
	ids := wr.chosen()
	var all ops.Routing
	for _, r := range routings {
		all.IDs = append(all.IDs, r.IDs...)
	}
	if want := Chosen(all); fmt.Sprint(ids) != fmt.Sprint(want) {
		t.Fatalf("the wave's chosen experts %v, want %v", ids, want)
	}
	// callBytes is the most one pool's call over chunk c of ids takes
	callBytes := func(lo, hi, chunk int) int64 {
		var most int64
		for c := 0; c*chunk < len(ids); c++ {
			in := map[int32]bool{}
			for _, id := range ids[c*chunk : min((c+1)*chunk, len(ids))] {
				in[int32(id)] = true
			}
			pairs := 0
			for j := lo; j < hi; j++ {
				for _, id := range routings[j].IDs {
					if in[id] {
						pairs++
					}
				}
			}
			most = max(most, m.expertCallBytes(bounds[hi]-bounds[lo], pairs))
		}
		return most
	}
	for _, chunk := range []int{1, 5, len(ids)} {
		one := callBytes(6, 7, chunk) // the largest slice alone
		for _, budget := range []int64{0, one, 3 * one, 1 << 40} {
			f := &Pass{Model: m, PoolBytes: budget}
			ps := f.pools(bounds, wr, ids, chunk)
			next := 0
			for _, p := range ps {
				if p.lo != next || p.hi <= p.lo {
					t.Fatalf("chunk %d, budget %d: pools %v do not cover the slices in order", chunk, budget, ps)
				}
				next = p.hi
				if p.hi-p.lo > 1 && callBytes(p.lo, p.hi, chunk) > budget {
					t.Errorf("chunk %d, budget %d: pool %d..%d takes %d bytes", chunk, budget, p.lo, p.hi-1, callBytes(p.lo, p.hi, chunk))
				}
				if p.hi < len(sizes) && callBytes(p.lo, p.hi+1, chunk) <= budget {
					t.Errorf("chunk %d, budget %d: pool %d..%d could take slice %d", chunk, budget, p.lo, p.hi-1, p.hi)
				}
				if n := bounds[p.hi] - bounds[p.lo]; len(p.routing.IDs) != n*k || len(p.routing.Weights) != n*k {
					t.Errorf("pool %d..%d: routing of %d ids for %d rows", p.lo, p.hi-1, len(p.routing.IDs), n)
				}
				// the pool's routing is its slices' routings, one after the other
				var want ops.Routing
				for j := p.lo; j < p.hi; j++ {
					want.IDs = append(want.IDs, routings[j].IDs...)
					want.Weights = append(want.Weights, routings[j].Weights...)
				}
				if !slices.Equal(p.routing.IDs, want.IDs) || !slices.Equal(p.routing.Weights, want.Weights) || p.routing.K != k {
					t.Errorf("pool %d..%d: routing differs from its slices'", p.lo, p.hi-1)
				}
			}
			if next != len(sizes) {
				t.Fatalf("chunk %d, budget %d: pools %v end at slice %d of %d", chunk, budget, ps, next, len(sizes))
			}
			switch budget {
			case 0:
				if len(ps) != len(sizes) {
					t.Errorf("budget 0: %d pools for %d slices", len(ps), len(sizes))
				}
			case 1 << 40:
				if len(ps) != 1 {
					t.Errorf("an unbounded budget: %d pools", len(ps))
				}
			}
		}
	}
}

// TestStashOnDevice: a stash on the device keeps the tensors put in row order and joins exactly a run of
// whole slices, refusing rows out of order or a range that cuts a slice, with the rows named; take hands
// over or joins rows and drops them.
func TestStashOnDevice(t *testing.T) {
	b := cpu.New(cpu.Options{})
	f := &Pass{Model: &Model{Ops: b}, StashOnDevice: true}
	s := f.newStash(9, 2)
	if !s.keeps() {
		t.Fatal("a stash on the device on a backend with ops.RowJoiner does not keep its tensors")
	}
	rows := func(lo, n int) ops.Tensor {
		v := make([]float32, 2*n)
		for i := range v {
			v[i] = float32(2*lo + i)
		}
		x, err := b.FromHost(n, 2, v)
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	for _, r := range [][2]int{{0, 3}, {3, 2}, {5, 4}} {
		if err := s.put(b, r[0], rows(r[0], r[1])); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.put(b, 4, rows(4, 1)); err == nil || !strings.Contains(err.Error(), "rows from 4 after rows 5..8") {
		t.Errorf("rows out of order: %v", err)
	}
	got, err := s.upload(b, 3, 9)
	if err != nil {
		t.Fatal(err)
	}
	v, _ := b.ToHost(got)
	for i, x := range v {
		if x != float32(6+i) {
			t.Fatalf("rows 3..8 joined: value %d is %g, want %d", i, x, 6+i)
		}
	}
	b.Free(got)
	for _, r := range [][2]int{{1, 5}, {0, 4}} {
		if _, err := s.upload(b, r[0], r[1]); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("rows %d..%d", r[0], r[1]-1)) {
			t.Errorf("rows %d..%d cut a slice: %v", r[0], r[1]-1, err)
		}
	}
	// take: one slice handed over as it is, several joined and dropped; taken rows are gone
	one, err := s.take(b, 3, 5)
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := b.ToHost(one); len(v) != 4 || v[0] != 6 || len(s.dev) != 2 {
		t.Errorf("take of slice 3..4: %v, %d tensors left, want [6 7 8 9] and 2", v, len(s.dev))
	}
	b.Free(one)
	both, err := s.take(b, 5, 9)
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := b.ToHost(both); len(v) != 8 || v[7] != 17 || len(s.dev) != 1 || s.at[0] != 0 {
		t.Errorf("take of slice 5..8: %v, %d tensors left, want 10..17 and slice 0..2", v, len(s.dev))
	}
	b.Free(both)
	if _, err := s.take(b, 3, 5); err == nil {
		t.Error("rows taken before taken again")
	}
	s.release(f)
	if len(s.dev) != 0 {
		t.Error("release left tensors in the stash")
	}
}

// TestChosen: the distinct ids of a routing, ascending, whatever their order and repeats.
func TestChosen(t *testing.T) {
	for _, c := range []struct {
		ids  []int32
		want []int
	}{
		{nil, []int{}},
		{[]int32{3}, []int{3}},
		{[]int32{5, 0, 5, 2, 0, 895}, []int{0, 2, 5, 895}},
	} {
		if got := Chosen(ops.Routing{K: 1, IDs: c.ids}); fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("Chosen(%v) = %v, want %v", c.ids, got, c.want)
		}
	}
}

// BenchmarkPoolsK3 times the host's work on an expert-major layer's routing for a wave of 262,144 tokens
// in 4 slices at K3's routing (16 of 896 experts a token): the wave's routing filled slice by slice, then
// the chosen experts and the pools at the start of the expert phase, which the device waits for
// (docs/records/run51).
func BenchmarkPoolsK3(b *testing.B) {
	const experts, k, tokens, slices = 896, 16, 262144, 4
	m := &Model{Ops: cpu.New(cpu.Options{}), Dims: Dims{Latent: 3584, ExpertFFN: 3072, TopK: k, Experts: experts}}
	rng := rand.New(rand.NewPCG(1, 2))
	bounds := []int{0}
	var routings []ops.Routing
	for range slices {
		n := tokens / slices
		bounds = append(bounds, bounds[len(bounds)-1]+n)
		r := ops.Routing{K: k, IDs: make([]int32, n*k), Weights: make([]float32, n*k)}
		for i := range r.IDs {
			r.IDs[i] = int32(rng.IntN(experts))
		}
		routings = append(routings, r)
	}
	f := &Pass{Model: m, PoolBytes: 1 << 40}
	b.ResetTimer()
	for range b.N {
		// the first phase's share, slice by slice while the device computes
		wr := newWaveRouting(tokens, k, experts, slices)
		for j, r := range routings {
			if err := wr.put(j, bounds[j], r); err != nil {
				b.Fatal(err)
			}
		}
		// the expert phase's start, with the device waiting
		if p := f.pools(bounds, wr, wr.chosen(), 128); len(p) != 1 {
			b.Fatalf("%d pools, want 1", len(p))
		}
	}
}
