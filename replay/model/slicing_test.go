package model

import (
	"fmt"
	"testing"

	"github.com/potato-k3/potato-k3/replay/ops"
)

// recorder is an Observer that keeps what it hears; wanting is one that also says what it keeps (Wanter).
type recorder struct {
	routings []ops.Routing
	mixes    [][]float32
}

func (r *recorder) Routing(_ int, x ops.Routing)                { r.routings = append(r.routings, x) }
func (r *recorder) Mix(_ int, _ Site, weights []float32, _ int) { r.mixes = append(r.mixes, weights) }
func (r *recorder) got() *recorder                              { return r }

type wanting struct {
	recorder
	routing, mixes bool
}

func (w *wanting) Wants() (bool, bool) { return w.routing, w.mixes }

// TestSeenObs: sliced, a layer's slices' routings and mixing weights reach the observer once, joined in
// row order; an observer that says it wants neither (Wanter) hears each once, empty.
func TestSeenObs(t *testing.T) {
	slice := func(j int) (ops.Routing, []float32) {
		return ops.Routing{K: 2, IDs: []int32{int32(j), int32(j + 1)}, Weights: []float32{float32(j), 1}}, []float32{float32(10 * j)}
	}
	for _, c := range []struct {
		name             string
		obs              Observer
		wantIDs, wantMix string
	}{
		{"a plain observer", &recorder{}, "[0 1 1 2 2 3]", "[0 10 20]"},
		{"one that wants both", &wanting{routing: true, mixes: true}, "[0 1 1 2 2 3]", "[0 10 20]"},
		{"one that wants the routing", &wanting{routing: true}, "[0 1 1 2 2 3]", "[]"},
		{"one that wants neither", &wanting{}, "[]", "[]"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := &Pass{Obs: c.obs, slices: make([]ops.SliceLayout, 3)}
			var s seenObs
			for j := range 3 {
				r, w := slice(j)
				s.route(f, r)
				s.mix(f, SiteAttn, w, 1)
			}
			s.flush(f)
			rec := c.obs.(interface{ got() *recorder }).got()
			if len(rec.routings) != 1 || len(rec.mixes) != 1 {
				t.Fatalf("%d routings and %d mixes reported, want one each", len(rec.routings), len(rec.mixes))
			}
			if got := fmt.Sprint(rec.routings[0].IDs); got != c.wantIDs || rec.routings[0].K != 2 {
				t.Errorf("routing ids %s (top-%d), want %s (top-2)", got, rec.routings[0].K, c.wantIDs)
			}
			if got := fmt.Sprint(rec.mixes[0]); got != c.wantMix {
				t.Errorf("mixing weights %s, want %s", got, c.wantMix)
			}
		})
	}
}
