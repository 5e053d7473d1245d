package replay

import (
	"context"
	"math"
	"testing"

	"github.com/potato-k3/potato-k3/replay/checkpoint"
	"github.com/potato-k3/potato-k3/replay/cpu"
	"github.com/potato-k3/potato-k3/replay/model"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// A checkpoint whose KDA width (8 heads x 32 = 256) differs from its MLA width (4 x 32 = 128) and whose
// A_log is padded to 128 entries (the synth preset tiny-wide, as another implementation of the
// architecture writes one) opens and replays on the CPU backend: validation follows the architecture,
// not K3's particular numbers. Before, Open refused it ("K3 uses one width for both", then "A_log: want
// [32] F32, got [128] F32").
func TestWideKDACheckpointReplays(t *testing.T) {
	dir := synthModel(t, "tiny-wide", 1)
	d, err := checkpoint.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string][]int64{
		model.LayerPrefix(0) + "self_attn.A_log":            {128},
		model.LayerPrefix(0) + "self_attn.o_proj.weight":    {128, 256},
		model.LayerPrefix(3) + "self_attn.o_proj.weight":    {128, 128}, // layer 3 (1-indexed 4) is MLA
		model.LayerPrefix(0) + "self_attn.dt_bias":          {256},
		model.LayerPrefix(3) + "self_attn.kv_b_proj.weight": {4 * (32 + 32), 32},
	} {
		got, ok := d.Lookup(name)
		if !ok || !equalShape(got.Shape, want) {
			t.Errorf("%s: -want %v +got %v (present %v)", name, want, got.Shape, ok)
		}
	}
	d.Close()
	for _, prec := range []ops.Precision{ops.BF16, ops.FP32} {
		e, ckpt, err := Open(context.Background(), dir, cpu.New(cpu.Options{Precision: prec}), EngineOptions{})
		if err != nil {
			t.Fatalf("%v: Open: %v", prec, err)
		}
		if e.Model.Dims.KDAWidth != 256 || e.Model.Dims.ALogLen != 128 {
			t.Errorf("dims: KDA width %d, A_log %d", e.Model.Dims.KDAWidth, e.Model.Dims.ALogLen)
		}
		seqs := []Sequence{{Tokens: []int32{5, 17, 300, 2999, 42, 8, 1000}}, {Tokens: []int32{3, 4}}}
		req := Request{Sequences: seqs, Options: Options{TopK: 3, Lens: []int{0, 7}}}
		res, _, err := e.Run(context.Background(), []Request{req})
		if err != nil {
			t.Fatalf("%v: Run: %v", prec, err)
		}
		for _, r := range res[0] {
			for p, st := range r.Stats {
				if math.IsNaN(float64(st.Entropy)) || st.Entropy < 0 || (r.Targets[p] >= 0 && !(st.Logprob <= 0)) {
					t.Errorf("%v: sequence %d position %d: entropy %g, logprob %g", prec, r.SeqID, p, st.Entropy, st.Logprob)
				}
			}
		}
		// alone, the first sequence gives the same bits (batch invariance holds on this shape too)
		solo, _, err := e.Run(context.Background(), []Request{{Sequences: seqs[:1], Options: req.Options}})
		if err != nil {
			t.Fatal(err)
		}
		for p := range solo[0][0].Stats {
			if a, b := solo[0][0].Stats[p], res[0][0].Stats[p]; a.Logprob != b.Logprob || a.Entropy != b.Entropy {
				t.Errorf("%v: position %d alone %v, in a wave %v", prec, p, a, b)
			}
		}
		e.Close()
		ckpt.Close()
	}
}

func equalShape(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
