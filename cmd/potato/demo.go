package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/potato-k3/potato-k3/datasets"
	"github.com/potato-k3/potato-k3/replay"
	"github.com/potato-k3/potato-k3/replay/demomodel"
)

func init() {
	commands["demo"] = command{"replay two bundled conversations on the embedded default model (no GPU, no downloads)", runDemo}
}

// runDemo is the main job on the embedded default: the demo model (replay/demomodel, a small K3 trained on
// real text) on the CPU backend replays two of the bundled example conversations, with the logit lens at
// two layers, and prints what a researcher gets per token. The model is tiny, so its predictions are
// text-like rather than good; the machinery is the real one.
func runDemo(ctx context.Context, args []string, stdout io.Writer) error {
	fs := newFlags("demo", "usage: potato demo [--out FILE.arrow|.arrows|.parquet]\n\n"+
		"Replays two bundled conversations on the embedded default model (a small K3 trained on text) on the\n"+
		"CPU backend, with the logit lens at two layers and the router's choices: no GPU, no downloads.\n")
	out := fs.String("out", "", "also write the tables to FILE.arrow, FILE.arrows or FILE.parquet")
	if err := parseFlags(fs, args, stdout); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("demo", "demo: unexpected argument %q (the demo always replays two bundled conversations on the embedded default model)", fs.Arg(0))
	}
	if *out != "" {
		if err := checkOut(*out); err != nil {
			return err
		}
	}
	// The demo has no --model: modelDir's "no --model" line would suggest one.
	fmt.Fprintln(os.Stderr, "demo: the embedded default model ("+demomodel.Name+")")
	dir, err := demomodel.Dir(ctx, os.Stderr)
	if err != nil {
		return err
	}
	l, err := openEngine(ctx, dir, "cpu", "bf16", backendTuning{}, replay.EngineOptions{})
	if err != nil {
		return err
	}
	defer l.Close()
	req := replay.Request{Options: replay.Options{TopK: 3, Lens: []int{0, len(l.engine.Plan.Layers) / 2}, Router: true}}
	for _, c := range datasets.Examples()[:2] {
		s, err := replay.FromConversation(l.tok, c)
		if err != nil {
			return err
		}
		req.Sequences = append(req.Sequences, s)
	}
	res, stats, err := l.engine.Run(ctx, []replay.Request{req})
	if err != nil {
		return err
	}
	printSummary(stdout, l, res[0], stats, 24, "")
	r := res[0][0]
	fmt.Fprintf(stdout, "\nlogit lens, sequence 0 (entropy in nats at positions 0..7, by layer):\n")
	for _, ls := range append(r.Lens, replay.LayerStats{Layer: len(l.engine.Plan.Layers) - 1, Stats: r.Stats}) {
		fmt.Fprintf(stdout, "  layer %2d:", ls.Layer)
		for t := 0; t < len(ls.Stats) && t < 8; t++ {
			fmt.Fprintf(stdout, " %6.3f", ls.Stats[t].Entropy)
		}
		fmt.Fprintln(stdout)
	}
	fmt.Fprintf(stdout, "\nexperts chosen at position 0, by MoE layer:")
	for _, lr := range r.Router {
		fmt.Fprintf(stdout, " %d:%v", lr.Layer, lr.IDs[:lr.K])
	}
	fmt.Fprintln(stdout)
	fmt.Fprintln(stdout, "\nnext: potato replay --text \"...\" [--lens all --router --out results.arrow]; potato help")
	if *out != "" {
		return writeTables(ctx, stdout, l, &req, res[0], *out, false)
	}
	return nil
}
