package synth

import (
	"context"
	"io"
	"runtime"
	"strings"
	"testing"

	"github.com/potato-k3/potato-k3/replay/model"
)

// BenchmarkGenerate measures generation throughput at K3 sizes on all cores, data discarded (a disk is
// not measured): MB/s here is tensor bytes generated per second. A K3 MoE layer is 16.6 GB, 94% of it
// MXFP4 experts, so "experts" bounds the time of a dense k3-layer or k3-full write; "bf16" is a KDA
// projection (12288 x 7168), "embedding" the first rows of embed_tokens (each solves for its successors).
func BenchmarkGenerate(b *testing.B) {
	p, _ := LookupPreset("k3-layer")
	l, err := NewLayout(p, 2, 1)
	if err != nil {
		b.Fatal(err)
	}
	build, err := newBuilder(l.Plan, 1, p.numBPE)
	if err != nil {
		b.Fatal(err)
	}
	pick := func(keep func(Placed) bool, limit int) []Placed {
		var out []Placed
		for _, sh := range l.Shards {
			for _, t := range sh.Tensors {
				if keep(t) && len(out) < limit {
					out = append(out, t)
				}
			}
		}
		return out
	}
	cases := []struct {
		name    string
		tensors []Placed
	}{
		{"experts", pick(func(t Placed) bool { return strings.Contains(t.Name, ".experts.") }, 6*8)},
		{"bf16", pick(func(t Placed) bool { return strings.HasSuffix(t.Name, "layers.1.self_attn.q_proj.weight") }, 1)},
		{"embedding", []Placed{{Spec: spec(model.TextPrefix+"embed_tokens.weight", 2048, 7168)}}},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			var n int64
			for _, t := range tc.tensors {
				n += t.Bytes()
			}
			b.SetBytes(n)
			pool := &fillPool{workers: runtime.GOMAXPROCS(0), build: build, progress: newProgress(nil, 0, 0)}
			for b.Loop() {
				if err := pool.stream(context.Background(), tc.tensors, io.Discard); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
