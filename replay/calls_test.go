package replay

import (
	"context"
	"reflect"
	"testing"

	"github.com/potato-k3/potato-k3/replay/ops"
)

// TestExpertCallsCut: the plan counts an expert call's scratch for CallPairs pairs a row, not all top-k,
// and the model cuts a call whose experts bring more (model/moe_calls.go). In every layer mode (whole,
// sliced, expert-major, pooled; FP32 precision for one of them): no call passes CallPairs pairs a row, some call was
// cut (more calls than with the calls planned whole), the device peak stays within the plan, and every
// table equals the run whose calls are whole.
func TestExpertCallsCut(t *testing.T) {
	seqs := randomSequences(13, 3328, 150, 41, 300, 5)
	opts := Options{TopK: 3, Lens: []int{2}, Hidden: []int{1}, Router: true}
	for _, c := range []struct {
		name        string
		prec        ops.Precision
		opts        EngineOptions
		expertMajor bool
	}{
		{"whole", ops.BF16, EngineOptions{}, false},
		{"whole, chunks of 5", ops.BF16, EngineOptions{ExpertChunk: 5}, false},
		{"sliced", ops.BF16, EngineOptions{SliceTokens: 129, NoExpertPooling: true}, false},
		{"sliced", ops.FP32, EngineOptions{SliceTokens: 129, NoExpertPooling: true}, false},
		{"pooled", ops.BF16, EngineOptions{SliceTokens: 129, ExpertChunk: 8, PrefetchExperts: -1}, false},
		{"expert-major", ops.BF16, EngineOptions{SliceTokens: 65, ExpertChunk: 6}, true},
	} {
		t.Run(c.prec.String()+"/"+c.name, func(t *testing.T) {
			run := func(whole bool) ([][]Result, *counting, WavePlan) {
				cb := newCounting(c.prec)
				e := openPreset(t, "tiny", 1, cb, c.opts)
				cb.scratch = e.Model.ExpertScratchBytes
				e.forceExpertMajor, e.wholeCalls = c.expertMajor, whole
				cb.reset()
				got, _, err := e.Run(context.Background(), []Request{{Sequences: seqs, Options: opts}})
				if err != nil {
					t.Fatal(err)
				}
				return got, cb, e.plan
			}
			want, whole, _ := run(true)
			got, cut, p := run(false)
			if p.CallPairs < 1 || p.CallPairs >= 4 {
				t.Fatalf("plan %s: CallPairs %d, want 1 ... 3 of the tiny model's top-4", p, p.CallPairs)
			}
			for i, n := range cut.expertPairs {
				if rows := cut.expertRows[i]; n > p.CallPairs*rows {
					t.Errorf("expert call %d: %d pairs over %d rows, more than %d a row (%s)", i, n, rows, p.CallPairs, p)
				}
			}
			if len(cut.expertPairs) <= len(whole.expertPairs) {
				t.Errorf("%d expert calls cut, %d whole: no call was cut (%s)", len(cut.expertPairs), len(whole.expertPairs), p)
			}
			if limit := p.DevicePeak - p.WeightBytes; cut.peak > limit {
				t.Errorf("device peak of activations and carries %d bytes, over the plan's %d (%s)", cut.peak, limit, p)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("results with the calls cut differ from whole calls (%s)", p)
			}
			t.Logf("%s; %d expert calls (%d whole); counted peak %.2f MB of %.2f planned", p, len(cut.expertPairs),
				len(whole.expertPairs), float64(cut.peak)/1e6, float64(p.DevicePeak-p.WeightBytes)/1e6)
		})
	}
}
