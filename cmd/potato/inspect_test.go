package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// synthDir runs `potato synth` into a fresh directory and returns it.
func synthDir(t *testing.T, args ...string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "m")
	var out bytes.Buffer
	if err := run(context.Background(), append([]string{"synth", "-q", "--out", dir}, args...), &out); err != nil {
		t.Fatalf("synth %v: %v", args, err)
	}
	return dir
}

// TestInspectK3Full writes the full release layout sparsely and checks the audit's figures against the
// release: 497,220 tensors, 1,560,860,324,864 bytes, 69 KDA + 24 MLA layers, MLA at 3, 7, ..., 91, 92.
func TestInspectK3Full(t *testing.T) {
	start := time.Now()
	dir := synthDir(t, "--preset", "k3-full", "--sparse")
	var out bytes.Buffer
	if err := run(context.Background(), []string{"inspect", dir}, &out); err != nil {
		t.Fatalf("inspect: %v\n%s", err, out.String())
	}
	s := out.String()
	for _, want := range []string{
		"497,220 tensors, 1,560,860,324,864 bytes of tensor data",
		"69 KDA + 24 MLA layers",
		"MLA at 3, 7, 11, 15, 19, 23, 27, 31, 35, 39, 43, 47, 51, 55, 59, 63, 67, 71, 75, 79, 83, 87, 91, 92\n",
		"AttnRes blocks of 12 start at 0, 12, 24, 36, 48, 60, 72, 84 (8 blocks)",
		"kda+dense                                1             23         23",
		"kda+moe                                 68           5404    367,472",
		"mla+moe                                 24           5398    129,552",
		"ignored (vision_tower., mm_projector.)                               168            894,717,952",
		"96 shards",
		"tokenizer: 163584 BPE tokens + 256 specials; BOS 163584, stop 163586, PAD 163839 as in config.json",
		"OK:",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("audit lacks %q", want)
		}
	}
	if t.Failed() {
		t.Log(s)
	}
	t.Logf("synth + inspect of k3-full: %s", time.Since(start).Round(time.Millisecond))
}

// TestInspectDamage damages a tiny directory in four ways; each must fail the audit with a line that
// names the file and the tensor.
func TestInspectDamage(t *testing.T) {
	const shard = "model-00002-of-000004.safetensors"
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, dir string) (tensor string)
		want   string
	}{
		{"truncated shard", func(t *testing.T, dir string) string {
			p := filepath.Join(dir, shard)
			st, err := os.Stat(p)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Truncate(p, st.Size()-100); err != nil {
				t.Fatal(err)
			}
			h := readHeader(t, p)
			return lastTensor(h)
		}, "past file size"},
		{"edited header", func(t *testing.T, dir string) string {
			return editHeader(t, filepath.Join(dir, shard), func(name string, e map[string]any) bool {
				if strings.HasSuffix(name, "q_proj.weight") {
					e["shape"] = []any{1, 2, 3}
					return true
				}
				return false
			})
		}, "shape [1 2 3]"},
		{"missing tensor", func(t *testing.T, dir string) string {
			name := editHeader(t, filepath.Join(dir, shard), func(name string, e map[string]any) bool {
				if strings.HasSuffix(name, "dt_bias") {
					clear(e)
					return true
				}
				return false
			})
			dropFromIndex(t, dir, name)
			return name
		}, "missing"},
		{"wrong dtype", func(t *testing.T, dir string) string {
			return editHeader(t, filepath.Join(dir, shard), func(name string, e map[string]any) bool {
				if strings.HasSuffix(name, "o_proj.weight") {
					e["dtype"] = "F16"
					return true
				}
				return false
			})
		}, "got [128 128] F16"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := synthDir(t, "--preset", "tiny")
			tensor := tc.damage(t, dir)
			var out bytes.Buffer
			err := run(context.Background(), []string{"inspect", dir}, &out)
			if !errors.Is(err, errDamaged) {
				t.Fatalf("inspect: got %v, want errDamaged\n%s", err, out.String())
			}
			var line string
			for _, l := range strings.Split(out.String(), "\n") {
				if strings.HasPrefix(l, "VIOLATION") && strings.Contains(l, tensor) {
					line = l
				}
			}
			fileNamed := strings.Contains(line, shard) || (tc.name == "missing tensor" && line != "")
			if line == "" || !fileNamed || !strings.Contains(line, tc.want) {
				t.Fatalf("no violation naming %s, tensor %s and %q:\n%s", shard, tensor, tc.want, out.String())
			}
		})
	}
}

// TestInspectTokenizer removes the tokenizer's vocabulary file: the audit must fail and name it.
func TestInspectTokenizer(t *testing.T) {
	dir := synthDir(t, "--preset", "tiny")
	if err := os.Remove(filepath.Join(dir, "tiktoken.model")); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	err := run(context.Background(), []string{"inspect", dir}, &out)
	if !errors.Is(err, errDamaged) || !strings.Contains(out.String(), "VIOLATION tokenizer") ||
		!strings.Contains(out.String(), "tiktoken.model") {
		t.Fatalf("got %v:\n%s", err, out.String())
	}
}

// readHeader returns the JSON header of a shard as a map.
func readHeader(t *testing.T, path string) map[string]map[string]any {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n := binary.LittleEndian.Uint64(data)
	var h map[string]map[string]any
	if err := json.Unmarshal(data[8:8+n], &h); err != nil {
		t.Fatal(err)
	}
	return h
}

// lastTensor returns the tensor with the largest data offset.
func lastTensor(h map[string]map[string]any) string {
	var best string
	var end float64 = -1
	for name, e := range h {
		if offs, ok := e["data_offsets"].([]any); ok && offs[1].(float64) > end {
			best, end = name, offs[1].(float64)
		}
	}
	return best
}

// editHeader rewrites a shard's header: edit is called for each tensor entry, in no particular order,
// until it returns true; an entry left empty by edit is deleted. The data section is kept as is (its
// offsets are relative to the header's end). It returns the tensor edited.
func editHeader(t *testing.T, path string, edit func(name string, e map[string]any) bool) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n := binary.LittleEndian.Uint64(data)
	var h map[string]map[string]any
	if err := json.Unmarshal(data[8:8+n], &h); err != nil {
		t.Fatal(err)
	}
	var done string
	for name, e := range h {
		if name == "__metadata__" {
			continue
		}
		if edit(name, e) {
			done = name
			break
		}
	}
	if done == "" {
		t.Fatal("no tensor to edit")
	}
	if len(h[done]) == 0 {
		delete(h, done)
	}
	js, err := json.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	out := binary.LittleEndian.AppendUint64(nil, uint64(len(js)))
	out = append(append(out, js...), data[8+n:]...)
	if err := os.WriteFile(path, out, 0o644); err != nil {
		t.Fatal(err)
	}
	return done
}

// dropFromIndex removes a tensor from the index's weight_map.
func dropFromIndex(t *testing.T, dir, name string) {
	t.Helper()
	p := filepath.Join(dir, "model.safetensors.index.json")
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var idx map[string]map[string]any
	if err := json.Unmarshal(data, &idx); err != nil {
		t.Fatal(err)
	}
	delete(idx["weight_map"], name)
	out, err := json.Marshal(idx)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, out, 0o644); err != nil {
		t.Fatal(err)
	}
}
