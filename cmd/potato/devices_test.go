package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/potato-k3/potato-k3/cuda"
	"github.com/potato-k3/potato-k3/datasets"
	"github.com/potato-k3/potato-k3/replay/tables"
)

// TestDevicesFlag: --devices takes a comma-separated list of device ordinals, repeats allowed.
func TestDevicesFlag(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		ok       bool
	}{{"0", "0", true}, {"0,0", "0,0", true}, {" 1, 0 ,3", "1,0,3", true}, {"", "", false}, {"a", "", false}, {"0,-1", "", false}} {
		var d deviceList
		err := d.Set(tc.in)
		if (err == nil) != tc.ok || (tc.ok && d.String() != tc.want) {
			t.Errorf("--devices %q: %v, %q; want ok %v, %q", tc.in, err, d.String(), tc.ok, tc.want)
		}
	}
}

// TestReplayDevices: `potato replay --devices 0,0` (and 0,0,0) writes every table row for row as
// `--devices 0` does, and prints the same per-token summary and the same weight bytes read (once for all
// the devices), on the cpu backend and, on a GPU machine, on cuda (the one-GPU check of the
// orchestration: `go test ./cmd/potato -run TestReplayDevices -v`).
func TestReplayDevices(t *testing.T) {
	model := tinyModel(t)
	dir := t.TempDir()
	chats := filepath.Join(dir, "chats.jsonl")
	if err := os.WriteFile(chats, datasets.ExamplesJSONL(), 0o644); err != nil {
		t.Fatal(err)
	}
	backends := []string{"cpu"}
	if cuda.Available() == nil {
		backends = append(backends, "cuda")
	}
	names := []string{"tokens", "lens", "hidden", "router", "attnres"}
	for _, backend := range backends {
		run := func(devices string) string {
			out := filepath.Join(dir, backend+"-"+strings.ReplaceAll(devices, ",", "_")+".arrow")
			var stdout bytes.Buffer
			args := []string{"--model", model, "--backend", backend, "--chat", chats, "--top-k", "3", "--lens", "2,7",
				"--hidden", "0,7", "--router", "--attnres", "--show", "5", "--no-progress", "--devices", devices, "--out", out}
			if err := runReplay(context.Background(), args, &stdout); err != nil {
				t.Fatalf("%s --devices %s: %v", backend, devices, err)
			}
			var keep []string
			for i, line := range strings.Split(stdout.String(), "\n") {
				// the devices line says what each one ran; the file lines name the files written
				if strings.HasPrefix(line, "over ") || strings.Contains(line, out[:len(out)-len(".arrow")]) {
					continue
				}
				if i == 0 { // "...: N sequences, N tokens, bf16 on cuda, X MB of weights read in 0.12s": the bytes, not the time
					line = line[:strings.LastIndex(line, " in ")]
				}
				keep = append(keep, line)
			}
			return strings.Join(keep, "\n")
		}
		want := run("0")
		for _, devices := range []string{"0,0", "0,0,0"} {
			got := run(devices)
			if got != want {
				t.Errorf("%s --devices %s: the printed summary differs from --devices 0:\n%s\nwant\n%s", backend, devices, got, want)
			}
			for _, name := range names {
				a, err := tables.ReadFile(filepath.Join(dir, backend+"-0."+name+".arrow"), nil)
				if err != nil {
					t.Fatal(err)
				}
				b, err := tables.ReadFile(filepath.Join(dir, backend+"-"+strings.ReplaceAll(devices, ",", "_")+"."+name+".arrow"), nil)
				if err != nil {
					t.Fatal(err)
				}
				if !tables.SameRows(a, b) {
					t.Errorf("%s --devices %s: the %s table (%d rows) differs from --devices 0's (%d rows)", backend, devices, name, b.NumRows(), a.NumRows())
				}
			}
		}
	}
}

// TestDatasetJobDevices: a dataset job over --devices 0,0 (waves cut by the plan of both devices) writes
// the rows of a single run on one device, and a rerun on one device finds the job done (devices are not
// in the manifest's key: they never change a row).
func TestDatasetJobDevices(t *testing.T) {
	model := tinyModel(t)
	data := smallDataset(t, 6)
	root := t.TempDir()
	common := []string{"replay", "--model", model, "--chat", data, "--thinking", "off", "--top-k", "3", "--no-progress", "--show", "0"}
	runOK := func(args ...string) string {
		t.Helper()
		var out bytes.Buffer
		if err := run(context.Background(), append(append([]string{}, common...), args...), &out); err != nil {
			t.Fatalf("potato %s: %v", strings.Join(args, " "), err)
		}
		return out.String()
	}
	single := filepath.Join(root, "single.parquet")
	runOK("--out", single)
	dir := filepath.Join(root, "job") + "/"
	runOK("--devices", "0,0", "--wave-tokens", "600", "--out", dir)
	runOK("--out", dir) // resumed on one device: nothing left to do
	merged := filepath.Join(root, "merged.parquet")
	var out bytes.Buffer
	if err := run(context.Background(), []string{"merge", "--out", merged, dir}, &out); err != nil {
		t.Fatal(err)
	}
	a, err := tables.ReadFile(filepath.Join(root, "merged.tokens.parquet"), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := tables.ReadFile(filepath.Join(root, "single.tokens.parquet"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !tables.SameRows(a, b) {
		t.Errorf("the job over two devices (%d rows) differs from the single run on one (%d rows)", a.NumRows(), b.NumRows())
	}
}
