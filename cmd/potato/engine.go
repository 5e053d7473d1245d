package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/potato-k3/potato-k3/replay"
	"github.com/potato-k3/potato-k3/replay/checkpoint"
	"github.com/potato-k3/potato-k3/replay/cpu"
	"github.com/potato-k3/potato-k3/replay/ops"
	"github.com/potato-k3/potato-k3/replay/synth"
	"github.com/potato-k3/potato-k3/replay/tokenizer"
)

// loaded is an open engine with its tokenizer (nil when the model directory has none) and what to close.
type loaded struct {
	dir       string
	engine    *replay.Engine
	tok       *tokenizer.Tokenizer
	ckpt      *checkpoint.Dir
	backend   string
	precision ops.Precision
}

func (l *loaded) Close() {
	l.engine.Close()
	l.ckpt.Close()
}

// modelDir is the --model flag's value, or the embedded default model (written to the cache on first use).
func modelDir(ctx context.Context, dir string) (string, error) {
	if dir != "" {
		return dir, nil
	}
	fmt.Fprintln(os.Stderr, "no --model: using the embedded default (synthetic preset tiny, seed 1, on the CPU)")
	return synth.Default(ctx)
}

// openEngine opens dir (or the default model) on the named backend.
func openEngine(ctx context.Context, dir, backend, precision string, opts replay.EngineOptions) (*loaded, error) {
	prec, err := ops.ParsePrecision(precision)
	if err != nil {
		return nil, err
	}
	var b ops.Backend
	switch backend {
	case "cpu":
		b = cpu.New(cpu.Options{Precision: prec})
	default:
		return nil, fmt.Errorf("backend %q: this build has the cpu backend only", backend)
	}
	if dir, err = modelDir(ctx, dir); err != nil {
		return nil, err
	}
	e, d, err := replay.Open(ctx, dir, b, opts)
	if err != nil {
		return nil, err
	}
	tok, err := tokenizer.Load(dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		e.Close()
		d.Close()
		return nil, err
	}
	return &loaded{dir: dir, engine: e, tok: tok, ckpt: d, backend: b.Name(), precision: prec}, nil
}
