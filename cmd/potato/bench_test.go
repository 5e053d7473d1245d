package main

import (
	"context"
	"strings"
	"testing"
)

// TestBenchCacheFlags: bench on the CPU with the host cache and resident layers warms them with an
// untimed wave, then times waves that read nothing from the checkpoint; bad sizes are refused.
func TestBenchCacheFlags(t *testing.T) {
	dir := tinyModel(t)
	var out, progress strings.Builder
	err := benchTo(context.Background(), []string{"--model", dir, "--tokens", "96", "--seq-len", "48", "--repeat", "1",
		"--host-cache", "100MB", "--resident", "1GB", "--bound-flops", "1e10"}, &out, &progress)
	if err != nil {
		t.Fatal(err)
	}
	// stderr says what runs before the first table: the bound's measurement, then the warm-up wave
	for _, want := range []string{"bench: measuring the bound (weight bandwidth", "bench: warm-up wave of 96 tokens (untimed)"} {
		if !strings.Contains(progress.String(), want) {
			t.Errorf("bench's progress on stderr lacks %q:\n%s", want, progress.String())
		}
	}
	for _, want := range []string{"warm-up wave of 96 tokens", "resident layers", "measured: uploads from host memory",
		"wave of 96 tokens (2 sequences of up to 48)", "to router s", "kda+moe"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("bench output lacks %q:\n%s", want, out.String())
		}
	}
	// With every layer resident and the experts cached, a timed wave moves only cached bytes.
	if !strings.Contains(out.String(), "from the host cache") || strings.Contains(out.String(), "(0.0 MB from the host cache)") {
		t.Errorf("the timed wave did not stream from the host cache:\n%s", out.String())
	}
	if err := runBench(context.Background(), []string{"--model", dir, "--host-cache", "lots"}, &out); err == nil {
		t.Error("--host-cache lots: no error")
	}
}

// TestBenchPlanOnly: --plan-only prints each size's plan without computing: one read while the host
// holds the state, several (said in the plan) past --host-memory, and a refusal naming the budget.
func TestBenchPlanOnly(t *testing.T) {
	dir := tinyModel(t)
	var out strings.Builder
	err := runBench(context.Background(), []string{"--model", dir, "--tokens", "1024,1048576", "--seq-len", "4096",
		"--plan-only", "--device-memory", "1GB", "--host-memory", "100MB"}, &out)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"plan: wave 1,024 tokens (1 sequence, longest 1,024) in 1 read: 1 slice",
		"plan: wave 1,048,576 tokens (256 sequences, longest 4,096) in 2 reads", "in host memory"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("bench --plan-only lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "wave of 1,024 tokens") {
		t.Errorf("bench --plan-only computed a wave:\n%s", out.String())
	}
	out.Reset()
	if err := runBench(context.Background(), []string{"--model", dir, "--tokens", "1024", "--plan-only", "--device-memory", "1MB"}, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "--device-memory") {
		t.Errorf("a 1 MB device budget: want a refusal naming --device-memory:\n%s", out.String())
	}
}

// TestBenchPinsReadAhead: before the timed waves of a size whose experts are read ahead, bench allocates
// the read-ahead's host buffers and says so, once, before that size's plan; a size too small to read
// ahead (8 tokens) pins nothing, and a later larger size is still pinned before it is timed.
func TestBenchPinsReadAhead(t *testing.T) {
	dir := tinyModel(t)
	var out, progress strings.Builder
	err := benchTo(context.Background(), []string{"--model", dir, "--tokens", "8,512", "--seq-len", "128", "--repeat", "1",
		"--bound-flops", "1e10"}, &out, &progress)
	if err != nil {
		t.Fatal(err)
	}
	s := out.String()
	pin := strings.Index(s, "host buffers (the experts' read-ahead, state kept in host memory):")
	small, large := strings.Index(s, "wave of 8 tokens"), strings.Index(s, "plan: wave 512 tokens")
	if pin < 0 || strings.Count(s, "host buffers (the experts' read-ahead, state kept in host memory):") != 1 || !(small < pin && pin < large) {
		t.Errorf("want one read-ahead pinning line after the 8-token wave and before the 512-token plan:\n%s", s)
	}
	if !strings.Contains(s, "before the timed waves of 512 tokens") {
		t.Errorf("the pinning line does not name its size:\n%s", s)
	}
}

// A wave that beats its bound says the bound is no ceiling, and says so only then.
func TestBenchBeatenBound(t *testing.T) {
	dir := tinyModel(t)
	for _, tt := range []struct {
		bounds   []string
		wantNote bool
	}{
		{[]string{"--bound-flops", "1e18", "--bound-bandwidth", "1e15"}, false}, // no CPU reaches it: ratio far above 1
		{[]string{"--bound-flops", "1", "--bound-bandwidth", "1"}, true},        // one FLOP a second: the wave beats it
	} {
		var out, progress strings.Builder
		args := append([]string{"--model", dir, "--tokens", "48", "--seq-len", "48", "--repeat", "2"}, tt.bounds...)
		if err := benchTo(context.Background(), args, &out, &progress); err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(out.String(), "note: the wave beat its bound"); got != tt.wantNote {
			t.Errorf("bounds %v: note printed %v, want %v:\n%s", tt.bounds, got, tt.wantNote, out.String())
		}
		// the warm-up and the timed run plan one wave: its plan line prints once
		if n := strings.Count(out.String(), "plan: wave 48 tokens"); n != 1 {
			t.Errorf("the wave's plan line printed %d times, want once:\n%s", n, out.String())
		}
	}
}

// planPrinter prints a wave's plan once whatever free memory each run read its budget from, again when
// the plan itself changes (the timed waves' peak after the warm-up filled the host cache), and every line
// that is not a plan.
func TestPlanPrinter(t *testing.T) {
	var out strings.Builder
	p := planPrinter(&out)
	for _, s := range []string{
		"wave 48 tokens (1 sequence, longest 48) in 1 read: device peak 2.9 MB of 18.5 GB",
		"wave 48 tokens (1 sequence, longest 48) in 1 read: device peak 2.9 MB of 18.6 GB",
		"wave 48 tokens (1 sequence, longest 48) in 1 read: device peak 3.0 MB of 18.6 GB",
		"warning: something",
		"warning: something",
		"wave 96 tokens (2 sequences, longest 48) in 1 read: device peak 3.1 MB of 18.6 GB",
	} {
		p(s)
	}
	want := "plan: wave 48 tokens (1 sequence, longest 48) in 1 read: device peak 2.9 MB of 18.5 GB\n" +
		"plan: wave 48 tokens (1 sequence, longest 48) in 1 read: device peak 3.0 MB of 18.6 GB\n" +
		"plan: warning: something\nplan: warning: something\n" +
		"plan: wave 96 tokens (2 sequences, longest 48) in 1 read: device peak 3.1 MB of 18.6 GB\n"
	if out.String() != want {
		t.Errorf("-want\n%s+got\n%s", want, out.String())
	}
}
