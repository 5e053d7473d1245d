package tables

import (
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/potato-k3/potato-k3/replay"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// checkedAlloc returns an allocator that fails the test if anything it handed out is still held at the
// end: every record Build, ReadIPC or ReadParquet made must be released.
func checkedAlloc(t *testing.T) memory.Allocator {
	t.Helper()
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	t.Cleanup(func() { mem.AssertSize(t, 0) })
	return mem
}

// handSet builds the tables of handResults on mem, released when the test ends (before checkedAlloc's
// check, which was registered first).
func handSet(t *testing.T, mem memory.Allocator) *Set {
	t.Helper()
	set, err := Build(handResults(), Options{Allocator: mem})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(set.Release)
	return set
}

// spec describes one synthetic sequence for makeResults.
type spec struct {
	seq    int32
	tokens int
	conv   bool // fill Pieces/Messages/Channels (a conversation) or leave them empty (raw ids)
}

// makeResults builds results with every capture kind, shaped to hit the edge cases: the last position
// without a target (and junk in its Logprob/Rank that must become null), empty top-k lists, -Inf log
// probabilities, subnormal and negative-zero hidden values, and K = 0 routing rows.
func makeResults(seed uint64, dim int, specs ...spec) []replay.Result {
	rng := rand.New(rand.NewPCG(seed, 99))
	stats := func(n int, targets []int32) []ops.TokenStats {
		st := make([]ops.TokenStats, n)
		for t := range st {
			k := rng.IntN(4) // 0: an empty top-k
			st[t] = ops.TokenStats{Entropy: rng.Float32() * 5, TopIDs: make([]int32, k), TopLogp: make([]float32, k)}
			lp := float32(0)
			for j := range k {
				lp -= rng.Float32()
				st[t].TopIDs[j] = rng.Int32N(1000)
				st[t].TopLogp[j] = lp
			}
			if k == 3 {
				st[t].TopLogp[2] = float32(math.Inf(-1))
			}
			if targets[t] >= 0 {
				st[t].Logprob, st[t].Rank = -rng.Float32()*10, 1+rng.Int32N(100)
			} else {
				st[t].Logprob, st[t].Rank = 42, 42 // junk: must be written as null
			}
		}
		return st
	}
	var out []replay.Result
	for _, s := range specs {
		n := s.tokens
		r := replay.Result{SeqID: s.seq, Tokens: make([]int32, n), Targets: make([]int32, n)}
		for t := range n {
			r.Tokens[t] = rng.Int32N(1000)
		}
		for t := range n {
			r.Targets[t] = -1
			if t+1 < n {
				r.Targets[t] = r.Tokens[t+1]
			}
		}
		if s.conv {
			r.Conversation, r.Thinking = fmt.Sprintf("conv-%d", s.seq), []string{"on", "off"}[n%2]
			for t := range n {
				r.Pieces = append(r.Pieces, fmt.Sprintf("tok%d'\"é", r.Tokens[t]))
				r.Messages = append(r.Messages, int32(t/3))
				r.Channels = append(r.Channels, []string{"system", "user", "think", "response"}[t/3%4])
			}
		}
		r.Stats = stats(n, r.Targets)
		for _, layer := range []int{3, 1} { // not sorted: order must survive
			r.Lens = append(r.Lens, replay.LayerStats{Layer: layer, Stats: stats(n, r.Targets)})
			v := make([]float32, n*dim)
			for i := range v {
				v[i] = float32(rng.NormFloat64())
			}
			if len(v) > 2 {
				v[0], v[1] = float32(math.Copysign(0, -1)), 1e-6 // -0 and a float16 subnormal
			}
			r.Hidden = append(r.Hidden, replay.LayerVectors{Layer: layer, Dim: dim, Values: v})
		}
		for _, k := range []int{2, 0} {
			rt := replay.LayerRouting{Layer: 2 + k, K: k, IDs: make([]int32, n*k), Weights: make([]float32, n*k)}
			for i := range rt.IDs {
				rt.IDs[i], rt.Weights[i] = rng.Int32N(896), rng.Float32()
			}
			r.Router = append(r.Router, rt)
		}
		for _, site := range []string{"attn", "mlp"} {
			m := replay.Mix{Layer: 1, Site: site, N: 3, Weights: make([]float32, n*3)}
			for i := range m.Weights {
				m.Weights[i] = rng.Float32()
			}
			r.Mixes = append(r.Mixes, m)
		}
		out = append(out, r)
	}
	return out
}

// expectAfterRoundTrip is what reading results back must give: sequences without tokens are gone (they
// have no rows), optional per-token fields are filled with "" and -1, and positions without a target have
// 0 log probability and rank (null in the table).
func expectAfterRoundTrip(in []replay.Result) []replay.Result {
	var out []replay.Result
	for _, r := range in {
		if len(r.Tokens) == 0 {
			continue
		}
		n := len(r.Tokens)
		if len(r.Pieces) == 0 {
			r.Pieces, r.Messages, r.Channels = make([]string, n), make([]int32, n), make([]string, n)
			for t := range r.Messages {
				r.Messages[t] = -1
			}
		}
		clear := func(st []ops.TokenStats) []ops.TokenStats {
			st = append([]ops.TokenStats(nil), st...)
			for t := range st {
				if r.Targets[t] < 0 {
					st[t].Logprob, st[t].Rank = 0, 0
				}
			}
			return st
		}
		r.Stats = clear(r.Stats)
		lens := make([]replay.LayerStats, len(r.Lens))
		for i, l := range r.Lens {
			lens[i] = replay.LayerStats{Layer: l.Layer, Stats: clear(l.Stats)}
		}
		r.Lens = lens
		out = append(out, r)
	}
	return out
}

// diff returns "" when want and got are equal, else the path of the first difference with both values.
// Floats compare by bits (so -0 differs from 0 and a changed NaN payload shows), and a nil slice equals an
// empty one (a Result may hold either for an empty top-k).
func diff(want, got any) string {
	return diffValue("", reflect.ValueOf(want), reflect.ValueOf(got))
}

// diffValue is diff at path.
func diffValue(path string, w, g reflect.Value) string {
	switch w.Kind() {
	case reflect.Float32:
		if wb, gb := math.Float32bits(float32(w.Float())), math.Float32bits(float32(g.Float())); wb != gb {
			return fmt.Sprintf("%s: -want %v (%#08x) +got %v (%#08x)", path, w.Float(), wb, g.Float(), gb)
		}
	case reflect.Slice:
		if w.Len() != g.Len() {
			return fmt.Sprintf("%s: -want len %d +got len %d", path, w.Len(), g.Len())
		}
		for i := 0; i < w.Len(); i++ {
			if d := diffValue(fmt.Sprintf("%s[%d]", path, i), w.Index(i), g.Index(i)); d != "" {
				return d
			}
		}
	case reflect.Struct:
		for i := 0; i < w.NumField(); i++ {
			if d := diffValue(path+"."+w.Type().Field(i).Name, w.Field(i), g.Field(i)); d != "" {
				return d
			}
		}
	default:
		if !reflect.DeepEqual(w.Interface(), g.Interface()) {
			return fmt.Sprintf("%s: -want %v +got %v", path, w.Interface(), g.Interface())
		}
	}
	return ""
}
