// Command evaluate measures a model directory with the Go engine (CPU backend) for the demo model's
// provenance record: the mean logprob of the bundled example conversations (datasets/examples, in bf16
// and fp32), the logit-lens entropy of every layer averaged over their positions, and the mean loss on
// the first -heldout-tokens of a held-out id file (replay/demomodel/internal/corpus's heldout.u16), which
// checks the trainer's own held-out number with the engine. It prints one JSON object.
//
// Usage (from the repository root):
//
//	go run ./replay/demomodel/internal/evaluate -model replay/demomodel/model -heldout k3_ref/train/work/corpus/heldout.u16
package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"os"

	"github.com/potato-k3/potato-k3/datasets/examples"
	"github.com/potato-k3/potato-k3/replay"
	"github.com/potato-k3/potato-k3/replay/cpu"
	"github.com/potato-k3/potato-k3/replay/ops"
	"github.com/potato-k3/potato-k3/replay/tokenizer"
)

func main() {
	dir := flag.String("model", "replay/demomodel/model", "model directory")
	heldout := flag.String("heldout", "", "held-out ids (little-endian uint16); empty: skip")
	heldoutTokens := flag.Int("heldout-tokens", 8192, "held-out tokens to score, in windows of -window")
	window := flag.Int("window", 128, "window of the held-out score (the trainer's sequence length)")
	flag.Parse()
	if err := run(*dir, *heldout, *heldoutTokens, *window); err != nil {
		fmt.Fprintln(os.Stderr, "evaluate:", err)
		os.Exit(1)
	}
}

// score runs seqs on dir at prec and returns the token-weighted mean logprob and, with lens, the mean
// lens entropy per layer over every position.
func score(ctx context.Context, dir string, prec ops.Precision, seqs []replay.Sequence, lens bool) (float64, []float64, error) {
	eng, ck, err := replay.Open(ctx, dir, cpu.New(cpu.Options{Precision: prec}), replay.EngineOptions{})
	if err != nil {
		return 0, nil, err
	}
	defer eng.Close()
	defer ck.Close()
	req := replay.Request{Sequences: seqs}
	n := len(eng.Plan.Layers)
	if lens {
		for l := range n - 1 {
			req.Options.Lens = append(req.Options.Lens, l)
		}
	}
	res, _, err := eng.Run(ctx, []replay.Request{req})
	if err != nil {
		return 0, nil, err
	}
	var sum float64
	var count, positions int
	ent := make([]float64, n)
	for _, r := range res[0] {
		for t := range r.Tokens {
			if r.Targets[t] >= 0 {
				sum += float64(r.Stats[t].Logprob)
				count++
			}
			ent[n-1] += float64(r.Stats[t].Entropy) // the last layer's lens is the output itself
		}
		positions += len(r.Tokens)
		for _, ls := range r.Lens {
			for _, s := range ls.Stats {
				ent[ls.Layer] += float64(s.Entropy)
			}
		}
	}
	for i := range ent {
		ent[i] /= float64(positions)
	}
	if !lens {
		ent = nil
	}
	return sum / float64(count), ent, nil
}

func run(dir, heldout string, heldoutTokens, window int) error {
	ctx := context.Background()
	tok, err := tokenizer.Load(dir)
	if err != nil {
		return err
	}
	var seqs []replay.Sequence
	for _, c := range examples.All() {
		s, err := replay.FromConversation(tok, c)
		if err != nil {
			return fmt.Errorf("example %s: %w", c.ID, err)
		}
		seqs = append(seqs, s)
	}
	out := map[string]any{"model": dir, "examples": len(seqs)}
	means := map[string]float64{}
	for _, prec := range []ops.Precision{ops.BF16, ops.FP32} {
		m, ent, err := score(ctx, dir, prec, seqs, prec == ops.BF16)
		if err != nil {
			return err
		}
		means[prec.String()] = m
		if ent != nil {
			out["examples_lens_entropy"] = ent
		}
	}
	out["examples_mean_logprob"] = means
	if heldout != "" {
		b, err := os.ReadFile(heldout)
		if err != nil {
			return err
		}
		var hs []replay.Sequence
		for off := 0; off+2*(window+1) <= len(b) && len(hs)*window < heldoutTokens; off += 2 * window {
			ids := make([]int32, window+1)
			for i := range ids {
				ids[i] = int32(binary.LittleEndian.Uint16(b[off+2*i:]))
			}
			hs = append(hs, replay.FromIDs(tok, ids))
		}
		m, _, err := score(ctx, dir, ops.BF16, hs, false)
		if err != nil {
			return err
		}
		out["heldout_loss_engine_bf16"] = -m
		out["heldout_engine_tokens"] = len(hs) * window
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}
