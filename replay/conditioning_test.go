package replay

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/potato-k3/potato-k3/replay/cpu"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// perturbingBackend multiplies every embedding by (1 + 2^-9 r), r = ±1 drawn per element: a relative
// perturbation of the input far below what a trained model's outputs should notice.
type perturbingBackend struct {
	ops.Backend
	seed uint64
}

func (p *perturbingBackend) Gather(table ops.Tensor, ids []int32) (ops.Tensor, error) {
	t, err := p.Backend.Gather(table, ids)
	if err != nil {
		return nil, err
	}
	v, err := p.Backend.ToHost(t)
	if err != nil {
		return nil, err
	}
	p.Backend.Free(t)
	r := rand.New(rand.NewPCG(p.seed, 1))
	for i := range v {
		if r.IntN(2) == 0 {
			v[i] *= 1 + 1.0/512
		} else {
			v[i] *= 1 - 1.0/512
		}
	}
	return p.Backend.FromHost(len(ids), table.Cols(), v)
}

// compareRuns measures the agreement of two replays of the same sequences.
func compareRuns(a, b []Result) agreement {
	var ag agreement
	for s := range a {
		for pos := range a[s].Tokens {
			sa, sb := a[s].Stats[pos], b[s].Stats[pos]
			ag.positions++
			if sa.TopIDs[0] == sb.TopIDs[0] {
				ag.top1Same++
			}
			if a[s].Targets[pos] >= 0 {
				d := math.Abs(float64(sa.Logprob - sb.Logprob))
				ag.sumAbs += d
				ag.maxAbs = max(ag.maxAbs, d)
				ag.scored++
			}
			for li := range a[s].Router {
				ra, rb := a[s].Router[li], b[s].Router[li]
				ag.routed++
				if !sameSet(ra.IDs[pos*ra.K:(pos+1)*ra.K], rb.IDs[pos*rb.K:(pos+1)*rb.K]) {
					ag.routeDiff++
				}
			}
		}
	}
	return ag
}

// TestWellConditioned: the synthetic presets behave like a trained model numerically: bf16 vs fp32 of the
// same engine, and fp32 vs fp32 with the embeddings perturbed by 2^-9, agree on top-1 for >= 98% of
// positions, within 0.05 nats of mean |delta logprob|, with expert choices differing for <= 2% of
// (token, layer) pairs. Every numerical comparison in the project depends on this.
func TestWellConditioned(t *testing.T) {
	presets := []struct {
		name    string
		vocab   int
		lengths []int
	}{
		{"tiny", 3328, []int{64, 64, 33, 7, 128}},
		{"small", 33024, []int{64, 96, 17}},
	}
	for _, p := range presets {
		if p.name == "small" && testing.Short() {
			continue
		}
		t.Run(p.name, func(t *testing.T) {
			req := Request{Sequences: randomSequences(11, p.vocab, p.lengths...), Options: Options{TopK: 1, Router: true}}
			run := func(b ops.Backend) []Result {
				return runOne(t, openPreset(t, p.name, 1, b, EngineOptions{}), req)[0]
			}
			fp32 := run(cpu.New(cpu.Options{Precision: ops.FP32}))
			cases := []struct {
				name string
				b    ops.Backend
			}{
				{"bf16 vs fp32", cpu.New(cpu.Options{Precision: ops.BF16})},
				{"fp32 with 2^-9 input perturbation vs fp32", &perturbingBackend{cpu.New(cpu.Options{Precision: ops.FP32}), 3}},
			}
			for _, c := range cases {
				ag := compareRuns(fp32, run(c.b))
				t.Logf("%s, %s: %d positions: top-1 agreement %.4f, mean |dlogprob| %.4f nats (max %.4f), expert sets differing %.4f of %d (token, layer) pairs",
					p.name, c.name, ag.positions, ag.top1(), ag.meanAbs(), ag.maxAbs, ag.flips(), ag.routed)
				if ag.top1() < 0.98 || ag.meanAbs() > 0.05 || ag.flips() > 0.02 {
					t.Errorf("%s, %s: not well-conditioned (want top-1 >= 0.98, mean |dlogprob| <= 0.05, flips <= 0.02)", p.name, c.name)
				}
				if ag.routed == 0 {
					t.Errorf("%s: no routing compared", p.name)
				}
			}
		})
	}
}
