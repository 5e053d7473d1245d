package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/potato-k3/potato-k3/replay/model"
	"github.com/potato-k3/potato-k3/replay/synth"
)

func init() {
	commands["synth"] = command{"write a synthetic checkpoint in the official K3 format", runSynth}
}

// runSynth parses `potato synth --preset NAME --seed N --out DIR [--layers N] [--sparse]`.
func runSynth(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("synth", flag.ContinueOnError)
	fs.SetOutput(os.Stderr)
	var names []string
	for _, p := range synth.Presets() {
		names = append(names, p.Name)
	}
	preset := fs.String("preset", "tiny", "model shape: "+strings.Join(names, ", "))
	seed := fs.Uint64("seed", 1, "seed: the same preset, layers and seed give the same bytes")
	out := fs.String("out", "", "model directory to create (must not exist, or be empty)")
	layers := fs.Int("layers", 0, "number of layers (0: the preset's default)")
	sparse := fs.Bool("sparse", false, "write headers only and leave tensor data as holes (no disk blocks)")
	workers := fs.Int("workers", 0, "generator goroutines (0: one per CPU)")
	quiet := fs.Bool("q", false, "no progress lines on stderr")
	fs.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: potato synth --preset NAME --seed N --out DIR [--layers N] [--sparse]\n\npresets:")
		for _, p := range synth.Presets() {
			fmt.Fprintf(os.Stderr, "  %-9s %s\n", p.Name, p.Summary)
		}
		fmt.Fprintln(os.Stderr, "\nflags:")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *out == "" || fs.NArg() > 0 {
		fs.Usage()
		return errors.New("synth: --out DIR is required and takes no positional arguments")
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
	fmt.Fprintf(stdout, "wrote %s: preset %s, seed %d, %d layers, %d shards, %d tensors, %d bytes of tensor data (%s) in %s\n",
		*out, l.Preset.Name, *seed, len(l.Plan.Layers), len(l.Shards), n, bytes, mode, time.Since(start).Round(time.Millisecond))
	return nil
}
