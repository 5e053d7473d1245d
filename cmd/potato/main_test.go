package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"strings"
	"testing"

	"github.com/potato-k3/potato-k3/replay"
)

// -h is help asked for: exit status 0 (it was 1), for every command, version included, and `potato help
// CMD` is `potato CMD -h`; a failure is 1 (a usage error 2: TestHelpAndUsageErrors).
func TestExitCode(t *testing.T) {
	for _, args := range [][]string{{"replay", "-h"}, {"version", "-h"}, {"help", "merge"}, {"help", "tokenize"}} {
		err := run(context.Background(), args, &bytes.Buffer{})
		if !errors.Is(err, flag.ErrHelp) || exitCode(err) != 0 {
			t.Errorf("potato %v: %v, exit %d, want flag.ErrHelp and 0", args, err, exitCode(err))
		}
	}
	if c := exitCode(errors.New("boom")); c != 1 {
		t.Errorf("an error: exit %d, want 1", c)
	}
	if c := exitCode(nil); c != 0 {
		t.Errorf("success: exit %d", c)
	}
}

// potato version and --version name the engine, the schema and the generator.
func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--version"}} {
		var out bytes.Buffer
		if err := run(context.Background(), args, &out); err != nil || !strings.HasPrefix(out.String(), "potato 0.1.0 (tables schema 3, synth generator 1)") {
			t.Errorf("potato %v: %q, %v", args, out.String(), err)
		}
	}
}

// inspect and tokenize take the model as every command does: --model DIR, or the embedded default.
func TestModelFlagEverywhere(t *testing.T) {
	model := tinyModel(t)
	for _, args := range [][]string{
		{"inspect", "--model", model}, {"inspect", model}, {"inspect"},
		{"tokenize", "--model", model, "--text", "hi"}, {"tokenize", "--text", "hi"},
	} {
		var out bytes.Buffer
		if err := run(context.Background(), args, &out); err != nil {
			t.Errorf("potato %v: %v", args, err)
		}
	}
	if err := run(context.Background(), []string{"inspect", "--model", model, model}, &bytes.Buffer{}); err == nil {
		t.Error("inspect with --model and an argument: accepted")
	}
	// a flag after the directory is a flag (it was read as a second directory)
	var before, after bytes.Buffer
	errB := run(context.Background(), []string{"inspect", "--layers=false", model}, &before)
	errA := run(context.Background(), []string{"inspect", model, "--layers=false"}, &after)
	if errB != nil || errA != nil || before.String() != after.String() {
		t.Errorf("inspect --layers=false DIR: %v; inspect DIR --layers=false: %v; -want +got:\n%s\n%s", errB, errA, before.String(), after.String())
	}
}

// The default top-k is one number: the CLI's is the service's and the engine's (0, none; it was 5 in
// the CLI only).
func TestDefaultTopK(t *testing.T) {
	model := tinyModel(t)
	var out bytes.Buffer
	if err := run(context.Background(), []string{"replay", "--model", model, "--text", "ab cd", "--no-progress"}, &out); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), `" -`) { // an alternative is printed as "piece" -logprob
		t.Errorf("replay without --top-k printed alternatives:\n%s", out.String())
	}
}

// The progress line never says 0s while work is left: under a second is "<1s", and after the last layer
// the readout is named (the engine's estimate does not count it).
func TestETA(t *testing.T) {
	for _, tt := range []struct {
		p    replay.Progress
		want string
	}{
		{replay.Progress{Layer: 3, Layers: 8, ETASeconds: 0.4}, "<1s"},
		{replay.Progress{Layer: 3, Layers: 8, ETASeconds: 20.2}, "20s"},
		{replay.Progress{Layer: 8, Layers: 8, ETASeconds: 0}, "the final readout only"},
	} {
		if got := eta(tt.p); got != tt.want {
			t.Errorf("eta(%+v): -want %q +got %q", tt.p, tt.want, got)
		}
	}
}
