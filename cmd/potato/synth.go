package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/potato-k3/potato-k3/internal/numtext"
	"github.com/potato-k3/potato-k3/replay/model"
	"github.com/potato-k3/potato-k3/replay/synth"
)

func init() {
	commands["synth"] = command{"write a synthetic checkpoint in the official K3 format", runSynth}
}

// runSynth parses `potato synth [--preset NAME] [--seed N] --out DIR [--layers N] [--sparse]`.
func runSynth(ctx context.Context, args []string, stdout io.Writer) error {
	var names []string
	var head strings.Builder
	head.WriteString("usage: potato synth [--preset NAME] [--seed N] --out DIR [--layers N] [--sparse]\n\n" +
		"Writes a synthetic checkpoint in the official K3 format (--preset tiny and --seed 1 unless given).\n\npresets:\n")
	for _, p := range synth.Presets() {
		names = append(names, p.Name)
		fmt.Fprintf(&head, "  %-9s %s\n", p.Name, p.Summary)
	}
	fs := newFlags("synth", head.String())
	preset := fs.String("preset", "tiny", "model shape: "+strings.Join(names, ", "))
	seed := fs.Uint64("seed", 1, "seed: the same preset, layers and seed give the same bytes")
	out := fs.String("out", "", "model directory to create (must not exist, or be empty)")
	layers := fs.Int("layers", 0, "number of layers (0: the preset's default)")
	sparse := fs.Bool("sparse", false, "write headers only and leave tensor data as holes (no disk blocks)")
	workers := fs.Int("workers", 0, "generator goroutines (0: one per CPU)")
	quiet := fs.Bool("q", false, "no progress lines on stderr")
	if err := parseFlags(fs, args, stdout); err != nil {
		return err
	}
	switch {
	case fs.NArg() > 0:
		return usagef("synth", "synth: unexpected argument %q (the directory is given by --out DIR)", fs.Arg(0))
	case *out == "":
		return usagef("synth", "synth: --out DIR is required")
	}
	// The sizes are checked before anything is built: the plan of a huge --layers would fill memory
	// before the disk-space check could refuse it.
	switch {
	case *layers < 0 || *layers > model.MaxLayers:
		return fmt.Errorf("synth: --layers %d: want 0 (the preset's default) up to %d", *layers, model.MaxLayers)
	case *workers < 0:
		return fmt.Errorf("synth: --workers %d is negative (0: one per CPU)", *workers)
	}
	o := synth.Options{Preset: *preset, Seed: *seed, Layers: *layers, Sparse: *sparse, Workers: *workers}
	if !*quiet {
		o.Progress = os.Stderr
	}
	start := time.Now()
	l, err := synth.Write(ctx, *out, o)
	if err != nil {
		return err
	}
	n, bytes := l.Totals()
	mode := "dense"
	if *sparse {
		mode = "sparse"
	}
	fmt.Fprintf(stdout, "wrote %s: preset %s, seed %d, %s, %s, %s, %s of tensor data (%s) in %s\n",
		*out, l.Preset.Name, *seed, numtext.Count(len(l.Plan.Layers), "layer"), numtext.Count(len(l.Shards), "shard"), numtext.Count(n, "tensor"),
		numtext.Count(bytes, "byte"), mode, time.Since(start).Round(time.Millisecond))
	return nil
}
