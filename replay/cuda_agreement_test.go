package replay

import (
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/potato-k3/potato-k3/cuda"
	"github.com/potato-k3/potato-k3/replay/cpu"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// The CUDA backend against the CPU backend on whole replays (GPU machines only: without libcuda, a device
// and NVRTC the tests skip, saying what is missing). Package replay imports cuda in these tests only.

// newCUDA makes a CUDA backend closed at the end of the test (after the engines opened on it, whose
// cleanups run first), or skips the test.
func newCUDA(t *testing.T, o cuda.Options) *cuda.Backend {
	t.Helper()
	if err := cuda.Available(); err != nil {
		t.Skipf("CUDA backend not available on this machine: %v", err)
	}
	b, err := cuda.New(o)
	if err != nil {
		t.Fatalf("cuda.New(%+v): %v", o, err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("cuda Close: %v", err)
		}
	})
	return b
}

// hiddenLayerRelErr is ||p_a - p_b|| / ||p_b|| per captured layer over all tokens of all sequences.
func hiddenLayerRelErr(a, b []Result) []float64 {
	if len(b) == 0 {
		return nil
	}
	out := make([]float64, len(b[0].Hidden))
	for l := range out {
		var num, den float64
		for s := range b {
			va, vb := a[s].Hidden[l].Values, b[s].Hidden[l].Values
			for i := range vb {
				d := float64(va[i]) - float64(vb[i])
				num += d * d
				den += float64(vb[i]) * float64(vb[i])
			}
		}
		out[l] = math.Sqrt(num / den)
	}
	return out
}

// TestCUDAAgreement replays the tiny and small presets on the CUDA and CPU backends at the same
// precision: in fp32 the running sum after every layer agrees to a relative error <= 1e-4; in bf16 the
// top-1 predictions agree at >= 99% of positions and the mean |delta logprob| is <= 0.01 nats
// (DESIGN.md, Tests and oracles). bf16 runs twice: with the tensor-core matmuls (the default) and with
// every matmul on the CUDA cores.
func TestCUDAAgreement(t *testing.T) {
	presets := []struct {
		name    string
		vocab   int
		lengths []int
	}{
		{"tiny", 3328, []int{64, 64, 33, 7, 128}},
		{"small", 33024, []int{64, 96, 17}},
	}
	for _, p := range presets {
		t.Run(p.name, func(t *testing.T) {
			for _, o := range []cuda.Options{{Precision: ops.FP32}, {Precision: ops.BF16}, {Precision: ops.BF16, NoTensorCores: true}} {
				prec := o.Precision
				cfg := prec.String()
				if prec == ops.BF16 && o.NoTensorCores {
					cfg += " (CUDA-core matmuls)"
				} else if prec == ops.BF16 {
					cfg += " (tensor-core matmuls)"
				}
				g := newCUDA(t, o)
				ref := openPreset(t, p.name, 1, cpu.New(cpu.Options{Precision: prec}), EngineOptions{})
				all := make([]int, len(ref.Plan.Layers))
				for i := range all {
					all[i] = i
				}
				req := Request{Sequences: randomSequences(11, p.vocab, p.lengths...), Options: Options{TopK: 5, Router: true, Hidden: all}}
				want := runOne(t, ref, req)[0]
				got := runOne(t, openPreset(t, p.name, 1, g, EngineOptions{}), req)[0]
				ag := compareRuns(want, got)
				rel := hiddenLayerRelErr(got, want)
				maxRel := 0.0
				for _, r := range rel {
					maxRel = max(maxRel, r)
				}
				t.Logf("%s %s: %d positions: top-1 agreement %.4f, mean |dlogprob| %.2e nats (max %.2e), expert sets differing %.4f of %d; hidden rel err per layer %.2e (max %.2e)",
					p.name, cfg, ag.positions, ag.top1(), ag.meanAbs(), ag.maxAbs, ag.flips(), ag.routed, rel, maxRel)
				switch prec {
				case ops.FP32:
					if maxRel > 1e-4 {
						t.Errorf("%s %s: hidden relative error up to %.3g, want <= 1e-4", p.name, cfg, maxRel)
					}
				case ops.BF16:
					if ag.top1() < 0.99 || ag.meanAbs() > 0.01 {
						t.Errorf("%s %s: top-1 %.4f (want >= 0.99), mean |dlogprob| %.4f (want <= 0.01)", p.name, cfg, ag.top1(), ag.meanAbs())
					}
				}
			}
		})
	}
}

// TestCUDABatchInvariance: on the CUDA backend every sequence's results are bit-identical replayed alone
// and inside a wave with others, with all chosen experts at once and three at a time.
func TestCUDABatchInvariance(t *testing.T) {
	seqs := randomSequences(3, 3328, 1, 17, 64, 65, 5)
	opts := Options{TopK: 5, Hidden: []int{0, 4, 7}, Lens: []int{2, 7}, Router: true, AttnRes: true}
	for _, prec := range []ops.Precision{ops.BF16, ops.FP32} {
		g := newCUDA(t, cuda.Options{Precision: prec})
		alone := openPreset(t, "tiny", 1, g, EngineOptions{})
		var want []Result
		for _, s := range seqs {
			want = append(want, runOne(t, alone, Request{Sequences: []Sequence{s}, Options: opts})[0][0])
		}
		for _, chunk := range []int{0, 3} {
			e := openPreset(t, "tiny", 1, g, EngineOptions{ExpertChunk: chunk})
			got := runOne(t, e,
				Request{Sequences: []Sequence{seqs[3], seqs[0], seqs[4]}, Options: opts},
				Request{Sequences: []Sequence{seqs[2], seqs[1]}, Options: opts})
			order := []struct{ req, seq, want int }{{0, 0, 3}, {0, 1, 0}, {0, 2, 4}, {1, 0, 2}, {1, 1, 1}}
			same := 0
			for _, o := range order {
				g, w := got[o.req][o.seq], want[o.want]
				g.SeqID, w.SeqID = 0, 0
				if !reflect.DeepEqual(g, w) {
					t.Errorf("cuda %s, expert chunk %d: sequence %d (len %d) differs in a wave from alone", prec, chunk, o.want, len(w.Tokens))
				} else {
					same++
				}
			}
			t.Logf("cuda %s, expert chunk %d: %d of %d sequences bit-identical in the wave and alone", prec, chunk, same, len(order))
		}
	}
}

// TestCUDASliceInvariance: on the CUDA backend a wave run in slices of several sizes, with the state on
// the device and in host memory, MoE layers sliced, pooled (plan_pool.go) and expert-major (the stash in
// host memory, and on the device: ops.RowJoiner), gives every table bit for bit as the unsliced wave (both precisions): the
// carried convolution, KDA state and MLA keys on the device. The unsliced wave rounds every MatMul's
// output eagerly, writes the norms' float32 outputs and norms each AttnRes mix in an op of its own, and
// the sliced ones defer the rounding to the readers, keep the norms' outputs in their bfloat16 copies
// alone and fuse each mix with its norm, so the test also holds deferred rounding (cuda/deferred.go),
// narrow-only outputs (cuda/narrow.go) and the fused mix (cuda/mixnorm.go) to the plain bits across
// every layer kind and carry.
func TestCUDASliceInvariance(t *testing.T) {
	opts := Options{TopK: 5, Lens: []int{1, 3}, Hidden: []int{0, 2}, Router: true, AttnRes: true}
	for _, prec := range []ops.Precision{ops.BF16, ops.FP32} {
		seqs := randomSequences(5, 3328, sliceSeqLens...)
		// the reference rounds every MatMul's output in the MatMul (cuda.Options.EagerRounding), writes
		// every norm's float32 output (EagerWidening) and runs each AttnRes mix and its norm as two ops
		// (UnfusedMixNorm); the sliced runs below leave the rounding to the readers (cuda/deferred.go), the
		// norms' outputs to their bfloat16 copies (cuda/narrow.go) and fuse the mixes with their norms
		// (cuda/mixnorm.go): the same bits either way
		whole := openPreset(t, "tiny", 1, newCUDA(t, cuda.Options{Precision: prec, EagerRounding: true, EagerWidening: true, UnfusedMixNorm: true}), EngineOptions{})
		want := runOne(t, whole, Request{Sequences: seqs, Options: opts})
		pooledHost := 0 // slice sizes that ran "pooled, host"
		for _, n := range []int{1, 7, 64, 65, 129} {
			for _, mode := range []string{"device", "pooled", "host", "pooled, host", "expert-major", "expert-major, stash on the device"} {
				host := mode == "host" || mode == "pooled, host" || mode == "expert-major"
				// "device" and "host" keep the MoE layers slice by slice, "pooled" lets the plan pool their
				// expert calls, "pooled, host" too with the state in host memory, the last phases folded
				// (model/moe_tail.go)
				eo := EngineOptions{SliceTokens: n, NoExpertPooling: mode == "device" || mode == "host", PrefetchExperts: -1}
				var plan string
				eo.Log = func(s string) { plan = s }
				// with the state in host memory, also the carried MLA prefix in parts of 64 rows; then
				// also the MoE layers expert-major, in chunks of 3 experts
				co := cuda.Options{Precision: prec}
				if host {
					co.MLAPrefixRows = 64
				}
				major := strings.HasPrefix(mode, "expert-major")
				if major {
					eo.ExpertChunk = 3
				}
				e := openPreset(t, "tiny", 1, newCUDA(t, co), eo)
				e.forceExpertMajor, e.forceHostStash = major, mode == "expert-major"
				if host {
					e.opts.DeviceMemory = slicedDeviceFor(t, e, n)
				}
				if mode == "pooled, host" { // room for the pooled stash, not for the state
					budget, ok := pooledHostBudget(sliceSeqLens, func(budget int64) *Engine {
						e.opts.DeviceMemory = budget
						return e
					}, e.opts.DeviceMemory)
					if !ok { // run 145: none for slices of 1 (the window is narrow: pooledHostBudget)
						t.Logf("%s, slices of %d: no device budget plans the wave pooled with the state in host memory", prec, n)
						continue
					}
					e.opts.DeviceMemory = budget
					pooledHost++
				}
				got := runOne(t, e, Request{Sequences: seqs, Options: opts})
				if host != strings.Contains(plan, "in host memory") || !strings.Contains(plan, "slices of") {
					t.Errorf("%s, slices of %d, host state %v: plan %q", prec, n, host, plan)
				}
				if e.plan.Pooled != strings.HasPrefix(mode, "pooled") || e.plan.FoldMajor != (mode == "pooled, host") {
					t.Errorf("%s, slices of %d (%s): plan %q, pooled %v, folded %v", prec, n, mode, plan, e.plan.Pooled, e.plan.FoldMajor)
				}
				if major && e.plan.StashOnDevice != (mode == "expert-major, stash on the device") {
					t.Errorf("%s, slices of %d (%s): plan %q, stash on the device %v", prec, n, mode, plan, e.plan.StashOnDevice)
				}
				if !reflect.DeepEqual(got, want) {
					t.Errorf("%s, slices of %d (%s): results differ from the unsliced wave; plan %s", prec, n, mode, plan)
				}
				// a second wave on the same engine: the pinned host buffers of the first, reused by
				// queued copies (statebufs.go)
				if host && n == 65 {
					if again := runOne(t, e, Request{Sequences: seqs, Options: opts}); !reflect.DeepEqual(again, want) {
						t.Errorf("%s, slices of %d (%s): a second wave differs from the unsliced wave", prec, n, mode)
					}
				}
			}
		}
		if pooledHost == 0 {
			t.Errorf("%s: no slice size found a device budget for the mode \"pooled, host\"", prec)
		}
	}
}
