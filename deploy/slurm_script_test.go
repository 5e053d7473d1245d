package deploy_test

import (
	"os"
	"os/exec"
	"path/filepath"
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
