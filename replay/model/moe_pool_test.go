package model

import (
	"math/rand/v2"
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
			r.Weights[i] = 1
		}
		routings = append(routings, r)
	}
	var all ops.Routing
	for _, r := range routings {
		all.IDs = append(all.IDs, r.IDs...)
	}
	ids := Chosen(all)
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
			ps := f.pools(bounds, routings, ids, chunk)
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
