package deploy_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The array script's choice of N and of the task's shard, run without Slurm: a stand-in potato prints
// the arguments it gets. Without SHARDS the array must be the whole 0-N-1; with it any task below N runs
// alone (a retry of one shard), and one past it is refused.
func TestSlurmScriptShards(t *testing.T) {
	dir := t.TempDir()
	stand := filepath.Join(dir, "potato")
	if err := os.WriteFile(stand, []byte("#!/bin/sh\necho \"args: $*\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		env  []string
		want string // in the output; "exit" cases fail with it
		fail bool
	}{
		{"whole array", []string{"SLURM_ARRAY_TASK_ID=1", "SLURM_ARRAY_TASK_MIN=0", "SLURM_ARRAY_TASK_MAX=2"},
			"--shard 1/3 --out " + dir + "/results/shard-1-of-3/", false},
		{"one shard again, SHARDS given", []string{"SHARDS=4", "SLURM_ARRAY_TASK_ID=3", "SLURM_ARRAY_TASK_MIN=3", "SLURM_ARRAY_TASK_MAX=3"},
			"--shard 3/4 --out " + dir + "/results/shard-3-of-4/", false},
		{"one shard again, no SHARDS", []string{"SLURM_ARRAY_TASK_ID=3", "SLURM_ARRAY_TASK_MIN=3", "SLURM_ARRAY_TASK_MAX=3"},
			"to rerun some shards of N, set SHARDS=N", true},
		{"past SHARDS", []string{"SHARDS=4", "SLURM_ARRAY_TASK_ID=4", "SLURM_ARRAY_TASK_MIN=0", "SLURM_ARRAY_TASK_MAX=4"},
			"task 4 is past SHARDS=4", true},
		{"thinking given", []string{"THINKING=off", "SLURM_ARRAY_TASK_ID=0", "SLURM_ARRAY_TASK_MIN=0", "SLURM_ARRAY_TASK_MAX=0"},
			"--chat " + dir + "/data.jsonl --thinking off --shard 0/1", false},
		// The task tells potato the job's share, less 10%, whatever potato finds free on the node.
		{"--mem", []string{"SLURM_MEM_PER_NODE=1000", "SLURM_ARRAY_TASK_ID=0", "SLURM_ARRAY_TASK_MIN=0", "SLURM_ARRAY_TASK_MAX=0"},
			"--show 0 --host-memory 900MiB", false},
		{"--mem-per-cpu", []string{"SLURM_MEM_PER_CPU=300", "SLURM_CPUS_ON_NODE=2", "SLURM_ARRAY_TASK_ID=0", "SLURM_ARRAY_TASK_MIN=0", "SLURM_ARRAY_TASK_MAX=0"},
			"--show 0 --host-memory 540MiB", false},
		{"--mem-per-gpu", []string{"SLURM_MEM_PER_GPU=2000", "SLURM_GPUS_ON_NODE=1", "SLURM_ARRAY_TASK_ID=0", "SLURM_ARRAY_TASK_MIN=0", "SLURM_ARRAY_TASK_MAX=0"},
			"--show 0 --host-memory 1800MiB", false},
		{"--mem=0, the whole node", []string{"SLURM_MEM_PER_NODE=0", "SLURM_ARRAY_TASK_ID=0", "SLURM_ARRAY_TASK_MIN=0", "SLURM_ARRAY_TASK_MAX=0"},
			"--show 0\n", false},
		{"--host-memory in POTATO_ARGS wins", []string{"SLURM_MEM_PER_NODE=1000", "POTATO_ARGS=--top-k 3 --host-memory 500MB", "SLURM_ARRAY_TASK_ID=0", "SLURM_ARRAY_TASK_MIN=0", "SLURM_ARRAY_TASK_MAX=0"},
			"--show 0 --top-k 3 --host-memory 500MB\n", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cmd := exec.Command("bash", "slurm/potato-array.sbatch")
			cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "POTATO=" + stand, "BACKEND=cpu",
				"DATA=" + dir + "/data.jsonl", "RESULTS=" + dir + "/results"}, tt.env...)
			out, err := cmd.CombinedOutput()
			if (err != nil) != tt.fail || !strings.Contains(string(out), tt.want) {
				t.Errorf("error %v (want failure %v), output:\n%s\nwant …%s…", err, tt.fail, out, tt.want)
			}
		})
	}
}

// The script's staging of $MODEL to local NVMe, run without Slurm: one copy for repeated tasks, links
// followed (a Hugging Face snapshot's files are links to ../../blobs/, which a copy of the links leaves
// dangling), and a checkpoint replaced at the same path copied anew, not read from the stale copy.
func TestSlurmScriptStaging(t *testing.T) {
	dir := t.TempDir()
	stand := filepath.Join(dir, "potato")
	if err := os.WriteFile(stand, []byte("#!/bin/sh\necho \"args: $*\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	// A Hugging Face cache: snapshots/rev/config.json -> ../../blobs/b1.
	hub := filepath.Join(dir, "hub")
	model := filepath.Join(hub, "snapshots", "rev")
	for _, d := range []string{filepath.Join(hub, "blobs"), model} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(hub, "blobs", "b1"), []byte(`{"v":1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../../blobs/b1", filepath.Join(model, "config.json")); err != nil {
		t.Fatal(err)
	}
	nvme := filepath.Join(dir, "nvme")
	run := func() (staged bool, copy string) {
		t.Helper()
		cmd := exec.Command("bash", "slurm/potato-array.sbatch")
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "POTATO=" + stand, "BACKEND=cpu", "MODEL=" + model,
			"LOCAL_NVME=" + nvme, "DATA=" + dir + "/data.jsonl", "RESULTS=" + dir + "/results",
			"SLURM_ARRAY_TASK_ID=0", "SLURM_ARRAY_TASK_MIN=0", "SLURM_ARRAY_TASK_MAX=0"}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		m := regexp.MustCompile(`--model (\S+)`).FindStringSubmatch(string(out))
		if m == nil {
			t.Fatalf("no --model in:\n%s", out)
		}
		return strings.Contains(string(out), "potato-array: staging"), m[1]
	}
	staged, first := run()
	if !staged || !strings.HasPrefix(first, nvme+"/potato-model-") {
		t.Fatalf("first task: staged %v, --model %s, want a copy under %s", staged, first, nvme)
	}
	if fi, err := os.Lstat(filepath.Join(first, "config.json")); err != nil {
		t.Error(err)
	} else if !fi.Mode().IsRegular() {
		t.Errorf("the staged config.json is %v; want the file the link points to, copied", fi.Mode())
	}
	if staged, again := run(); staged || again != first {
		t.Errorf("second task: staged %v, --model %s; want the first copy %s, not staged again", staged, again, first)
	}
	// The checkpoint replaced in place (a new revision at the same path).
	if err := os.WriteFile(filepath.Join(hub, "blobs", "b1"), []byte(`{"v":2, "new": true}`), 0o644); err != nil {
		t.Fatal(err)
	}
	staged, fresh := run()
	if !staged || fresh == first {
		t.Fatalf("after the model changed: staged %v, --model %s (before %s); want a new copy", staged, fresh, first)
	}
	if got, _ := os.ReadFile(filepath.Join(fresh, "config.json")); string(got) != `{"v":2, "new": true}` {
		t.Errorf("the new copy's config.json is %q", got)
	}
}
