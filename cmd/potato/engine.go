package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/potato-k3/potato-k3/cuda"
	"github.com/potato-k3/potato-k3/replay"
	"github.com/potato-k3/potato-k3/replay/checkpoint"
	"github.com/potato-k3/potato-k3/replay/cpu"
	"github.com/potato-k3/potato-k3/replay/demomodel"
	"github.com/potato-k3/potato-k3/replay/ops"
	"github.com/potato-k3/potato-k3/replay/tokenizer"
)

// loaded is an open engine with its tokenizer (nil when the model directory has none) and what to close.
type loaded struct {
	dir        string
	engine     *replay.Engine
	tok        *tokenizer.Tokenizer
	tokMissing error // why tok is nil: the tokenizer file the directory lacks (tokenizer.Load's error)
	ckpt       *checkpoint.Dir
	backend    string
	precision  ops.Precision
	closeB     func() // releases the backend (the GPU context); nil for the CPU
}

func (l *loaded) Close() {
	l.engine.Close()
	l.ckpt.Close()
	if l.closeB != nil {
		l.closeB()
	}
}

// backendTuning holds the backends' speed settings (bench flags), which leave results unchanged.
type backendTuning struct {
	expertStreams  int        // cuda.Options.ExpertStreams
	eagerRounding  bool       // cuda.Options.EagerRounding
	eagerWidening  bool       // cuda.Options.EagerWidening
	unfusedMixNorm bool       // cuda.Options.UnfusedMixNorm
	mlaMmaSync     bool       // cuda.Options.MLAMmaSync
	devices        deviceList // --devices: one backend each (devices.go); empty: device 0
	device         int        // the device newBackend opens (cuda.Options.Device)
}

// newBackend makes the named backend: "cpu" (pure Go, everywhere) or "cuda" (an NVIDIA GPU with the CUDA
// 13 driver and NVRTC; the error says what is missing where there is none).
func newBackend(name string, prec ops.Precision, tune backendTuning) (ops.Backend, func(), error) {
	switch name {
	case "cpu":
		return cpu.New(cpu.Options{Precision: prec}), nil, nil
	case "cuda":
		b, err := cuda.New(cuda.Options{Precision: prec, ExpertStreams: tune.expertStreams, EagerRounding: tune.eagerRounding,
			EagerWidening: tune.eagerWidening, UnfusedMixNorm: tune.unfusedMixNorm, MLAMmaSync: tune.mlaMmaSync, Device: tune.device})
		if err != nil {
			return nil, nil, fmt.Errorf("backend cuda: %w (use --backend cpu on a machine without a GPU)", err)
		}
		return b, func() { b.Close() }, nil
	}
	return nil, nil, fmt.Errorf("--backend %q: want cpu or cuda", name)
}

// modelDir is the --model flag's value, or the embedded default model (written to the cache on first use).
func modelDir(ctx context.Context, dir string) (string, error) {
	if dir != "" {
		return dir, nil
	}
	fmt.Fprintln(os.Stderr, "no --model: using the embedded default ("+demomodel.Name+")")
	return demomodel.Dir(ctx, os.Stderr)
}

// checkEngineFlags refuses a --backend or --precision that no engine opens, naming the flag (where
// ParsePrecision's error says "ops: precision"): the commands check them before anything is read, and
// openEngine with them.
func checkEngineFlags(backend, precision string) (ops.Precision, error) {
	prec, err := ops.ParsePrecision(precision)
	if err != nil {
		return prec, fmt.Errorf("--precision %q: want bf16 or fp32", precision)
	}
	if backend != "cpu" && backend != "cuda" {
		return prec, fmt.Errorf("--backend %q: want cpu or cuda", backend)
	}
	return prec, nil
}

// openEngine opens dir (or the default model) on the named backend; ckpt tunes the checkpoint reader.
func openEngine(ctx context.Context, dir, backend, precision string, tune backendTuning, opts replay.EngineOptions, ckpt ...checkpoint.Option) (*loaded, error) {
	prec, err := checkEngineFlags(backend, precision)
	if err != nil {
		return nil, err
	}
	if dir, err = modelDir(ctx, dir); err != nil {
		return nil, err
	}
	b, more, closeB, err := newBackends(backend, prec, tune) // one per --devices entry (devices.go)
	if err != nil {
		return nil, err
	}
	opts.Devices = more
	if err := shareDevices(os.Stderr, tune.devices, b, more, &opts); err != nil {
		if closeB != nil {
			closeB()
		}
		return nil, err
	}
	l := &loaded{dir: dir, backend: b.Name(), precision: prec, closeB: closeB}
	l.engine, l.ckpt, err = replay.Open(ctx, dir, b, opts, ckpt...)
	if err != nil {
		if closeB != nil {
			closeB()
		}
		return nil, err
	}
	l.tok, err = tokenizer.Load(dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		l.Close()
		return nil, err
	}
	l.tokMissing = err
	return l, nil
}
