package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// absurdModel copies the tiny model at src into a new directory and applies edit to its text_config.
func absurdModel(t *testing.T, src string, edit func(tc map[string]any)) string {
	t.Helper()
	dir := t.TempDir()
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if e.Name() == "config.json" {
			var f map[string]any
			if err := json.Unmarshal(b, &f); err != nil {
				t.Fatal(err)
			}
			edit(f["text_config"].(map[string]any))
			if b, err = json.Marshal(f); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(dir, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// layerLists sets num_hidden_layers to n with consistent 1-indexed layer lists.
func layerLists(tc map[string]any, n int) {
	var kda, full []int
	for l := 1; l <= n; l++ {
		if l%4 == 0 {
			full = append(full, l)
		} else {
			kda = append(kda, l)
		}
	}
	tc["num_hidden_layers"] = n
	la := tc["linear_attn_config"].(map[string]any)
	la["kda_layers"], la["full_attn_layers"] = kda, full
}

// inspect and replay refuse a config.json with absurd sizes by name, quickly and in little memory (they
// ran out of memory: a billion-entry layer plan, or a tensor list of a billion experts' names).
func TestAbsurdConfigRefused(t *testing.T) {
	tiny := tinyModel(t)
	tests := []struct {
		name string
		edit func(tc map[string]any)
		want string
	}{
		{"layers 1e9", func(tc map[string]any) { tc["num_hidden_layers"] = 1e9 }, "text_config.num_hidden_layers = 1000000000"},
		{"layers 100,000, consistent lists", func(tc map[string]any) { layerLists(tc, 100_000) }, "text_config.num_hidden_layers = 100000"},
		{"experts 1e9", func(tc map[string]any) { tc["num_experts"] = 1e9 }, "text_config.num_experts = 1000000000"},
		{"experts 16,000 (within the bound)", func(tc map[string]any) { tc["num_experts"] = 16000 },
			"text_config.num_experts = 16000 over 7 MoE layers (num_hidden_layers = 8) implies 672000 expert tensors"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := absurdModel(t, tiny, tc.edit)
			for _, args := range [][]string{
				{"inspect", dir},
				{"replay", "--model", dir, "--text", "hi", "--no-progress"},
			} {
				var out bytes.Buffer
				start := time.Now()
				err := run(context.Background(), args, &out)
				if err == nil {
					t.Errorf("potato %s: accepted", args[0])
					continue
				}
				if got := out.String() + err.Error(); !strings.Contains(got, tc.want) {
					t.Errorf("potato %s: -want …%s… +got %s", args[0], tc.want, got)
				}
				if d := time.Since(start); d > 10*time.Second {
					t.Errorf("potato %s: refused after %v", args[0], d)
				}
			}
		})
	}
}

// potato bench refuses every size it cannot bench before it opens or writes a model (--seq-len 0 looped
// forever, -1 panicked, a huge --tokens filled memory, negative bounds printed "ratio 0.00", --repeat 0
// ran once).
func TestBenchRefusesSizes(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "no-model")
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--seq-len", "0"}, "--seq-len 0"},
		{[]string{"--seq-len", "-1"}, "--seq-len -1"},
		{[]string{"--tokens", "9999999999999", "--plan-only"}, "--tokens: a wave of 9999999999999 tokens is past the limit of 1048576 (--max-wave-tokens)"},
		{[]string{"--tokens", "2048", "--max-wave-tokens", "1024"}, "past the limit of 1024 (--max-wave-tokens)"},
		{[]string{"--tokens", "64,0"}, `--tokens: "0" is not a wave size`},
		{[]string{"--tokens", "64,"}, `--tokens: "" is not a wave size`},
		{[]string{"--max-wave-tokens", "0"}, "--max-wave-tokens 0"},
		{[]string{"--bound-flops", "-1", "--bound-bandwidth", "-5"}, "--bound-flops -1"},
		{[]string{"--bound-bandwidth", "-5"}, "--bound-bandwidth -5"},
		{[]string{"--bound-flops", "+Inf"}, "--bound-flops +Inf"},
		{[]string{"--bound-flops", "NaN"}, "--bound-flops NaN"},
		{[]string{"--repeat", "0"}, "--repeat 0"},
		{[]string{"--repeat", "-1"}, "--repeat -1"},
		{[]string{"--expert-chunk", "-1"}, "--expert-chunk -1 is negative"},
		{[]string{"--read-workers", "-2"}, "--read-workers -2 is negative"},
		{[]string{"--prefetch-experts", "-2"}, "--prefetch-experts -2"},
		{[]string{"--slice-tokens", "-1"}, "--slice-tokens -1 is negative"},
		{[]string{"--devices", "5"}, "--devices 5: the cpu backend has device 0 alone"},
		{[]string{"256"}, `bench: unexpected argument "256"`},
		// the cuda backend's tuning flags on the cpu backend benched without them, silently
		{[]string{"--eager-rounding"}, "--eager-rounding tunes the cuda backend, and --backend is cpu"},
		{[]string{"--expert-streams", "2"}, "--expert-streams tunes the cuda backend, and --backend is cpu"},
		{[]string{"--mla-mma-sync"}, "--mla-mma-sync tunes the cuda backend"},
		{[]string{"--precision", "fp16"}, `bench: --precision "fp16": want bf16 or fp32`},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var out, progress bytes.Buffer
			err := benchTo(context.Background(), append([]string{"--model", missing}, tc.args...), &out, &progress)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("-want …%s… +got %v", tc.want, err)
			}
		})
	}
}

// potato synth refuses a --layers past what a model may have before it plans anything (the plan of 1e8
// layers filled memory before the disk-space check), and negative sizes.
func TestSynthRefusesSizes(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--layers", "100000000"}, "--layers 100000000: want 0 (the preset's default) up to 1024"},
		{[]string{"--layers", "-1"}, "--layers -1"},
		{[]string{"--workers", "-1"}, "--workers -1 is negative"},
		{[]string{"--preset", "k3-layer", "--layers", "1000", "--sparse"}, "k3-layer with 1000 layers has 5397136 tensors: more than the 1988880 synth writes"},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "m")
			err := run(context.Background(), append([]string{"synth", "-q", "--preset", "tiny", "--out", out}, tc.args...), &bytes.Buffer{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("-want …%s… +got %v", tc.want, err)
			}
			if _, err := os.Stat(out); err == nil {
				t.Errorf("%s was written", out)
			}
		})
	}
}

// potato replay refuses negative sizes and a token list with an empty entry, naming the flag, before the
// model opens (they were silently taken as 0 or dropped); on the cpu backend a device other than 0 too.
func TestReplayRefusesFlags(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "no-model")
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--text", "x", "--slice-tokens", "-1"}, "--slice-tokens -1 is negative"},
		{[]string{"--text", "x", "--expert-chunk", "-1"}, "--expert-chunk -1 is negative"},
		{[]string{"--text", "x", "--show", "-5"}, "--show -5 is negative"},
		{[]string{"--tokens", "1,,2"}, "--tokens: token list: entry 2 is empty"},
		{[]string{"--tokens", "1,2,"}, "--tokens: token list: entry 3 is empty"},
		{[]string{"--text", "x", "--devices", "5"}, "--devices 5: the cpu backend has device 0 alone"},
		{[]string{"--text", "x", "--devices", "0,1"}, "--devices 0,1: the cpu backend"},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			err := run(context.Background(), append([]string{"replay", "--model", missing, "--no-progress"}, tc.args...), &bytes.Buffer{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("-want …%s… +got %v", tc.want, err)
			}
		})
	}
}
