package deploy_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/potato-k3/potato-k3/replay/tables"
)

// buildPotato builds the potato command into dir and returns its path.
func buildPotato(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "potato")
	// go test puts its own toolchain's bin first on the test's PATH (Go 1.19 on): this go is the one
	// that runs the test
	cmd := exec.Command("go", "build", "-o", bin, "../cmd/potato")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/potato: %v\n%s", err, out)
	}
	return bin
}

// runCmd runs name with args in dir under env, failing the test with its output on error.
func runCmd(t *testing.T, ctx context.Context, dir string, env []string, name string, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir, cmd.Env = dir, env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestSlurmArray starts a single-node Slurm cluster from Debian's packages (munged, slurmctld, slurmd:
// slurm/testcluster.sh), submits slurm/potato-array.sbatch as a 3-task array on the tiny model on the
// CPU, waits for it, merges the three shard directories and compares the merged tokens table with one
// local `potato replay` of the same conversations, row for row (each run stamps its own result-set id). It needs root and the packages
// slurmctld slurmd slurm-client munge, and runs only with POTATO_SLURM_TEST=1 (.ci/run sets it after
// installing them).
func TestSlurmArray(t *testing.T) {
	if os.Getenv("POTATO_SLURM_TEST") != "1" {
		t.Skip("set POTATO_SLURM_TEST=1 to start a Slurm cluster here (root; apt-get install slurmctld slurmd slurm-client munge)")
	}
	if os.Getuid() != 0 {
		t.Fatal("POTATO_SLURM_TEST=1 but not root: slurmd must run as root to start jobs")
	}
	for _, bin := range []string{"munged", "slurmctld", "slurmd", "sbatch", "sinfo"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("POTATO_SLURM_TEST=1 but %s is missing: apt-get install slurmctld slurmd slurm-client munge", bin)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	// Not t.TempDir: the munge user must reach its socket and key under it (TempDir is 0700, root's).
	root, err := os.MkdirTemp("", "potato-slurm-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(root)
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	potato := buildPotato(t, root)
	env := os.Environ()
	model := filepath.Join(root, "tiny")
	runCmd(t, ctx, root, env, potato, "synth", "-q", "--preset", "tiny", "--out", model)
	data, err := filepath.Abs("../datasets/examples/examples.jsonl")
	if err != nil {
		t.Fatal(err)
	}

	cluster := filepath.Join(root, "cluster")
	script, _ := filepath.Abs("slurm/testcluster.sh")
	runCmd(t, ctx, root, env, script, "start", cluster)
	defer exec.Command(script, "stop", cluster).Run()
	env = append(env, "SLURM_CONF="+filepath.Join(cluster, "slurm.conf"), "POTATO="+potato, "MODEL="+model,
		"DATA="+data, "RESULTS="+filepath.Join(root, "results"), "BACKEND=cpu", "THINKING=", // every bundled example gives its thinking mode
		"LOCAL_NVME="+filepath.Join(root, "nvme"), "POTATO_ARGS=--wave-tokens 600 --top-k 3")
	sbatch, _ := filepath.Abs("slurm/potato-array.sbatch")
	// The script's own directives stay (--gres=gpu:1 is met by the test node's count-only GPU); only the
	// CPUs and memory a task asks are cut to this machine's.
	out := runCmd(t, ctx, root, env, "sbatch", "--wait", "--array=0-2", "--cpus-per-task=1", "--mem=1000",
		"--export=ALL", sbatch)
	t.Logf("sbatch: %s", strings.TrimSpace(out))
	logs, _ := filepath.Glob(filepath.Join(root, "potato-*.out"))
	if len(logs) != 3 {
		t.Errorf("%d task logs, want 3: %v", len(logs), logs)
	}
	for _, l := range logs {
		data, _ := os.ReadFile(l)
		if !bytes.Contains(data, []byte("job complete:")) {
			t.Errorf("%s:\n%s", l, data)
		}
		// --mem=1000 reaches the script as SLURM_MEM_PER_NODE, and potato gets it less 10%.
		if !bytes.Contains(data, []byte("(--host-memory 900MiB of the job's 1000MiB)")) {
			t.Errorf("%s does not say the task's host memory:\n%s", l, data)
		}
	}
	if staged, _ := filepath.Glob(filepath.Join(root, "nvme", "potato-model-*", ".potato-staged")); len(staged) != 1 {
		t.Errorf("the model was not staged to the local NVMe directory once (%v)", staged)
	}
	shards, _ := filepath.Glob(filepath.Join(root, "results", "shard-*-of-3"))
	if len(shards) != 3 {
		t.Fatalf("%d shard directories, want 3: %v", len(shards), shards)
	}
	merged := filepath.Join(root, "merged.parquet")
	runCmd(t, ctx, root, env, potato, append([]string{"merge", "--out", merged}, shards...)...)
	single := filepath.Join(root, "single.parquet")
	runCmd(t, ctx, root, env, potato, "replay", "--model", model, "--chat", data, "--top-k", "3",
		"--show", "0", "--no-progress", "--out", single)
	// the same rows as the local run (the two runs' tables carry their own result-set ids)
	a, err1 := tables.ReadParquet(filepath.Join(root, "merged.tokens.parquet"), memory.DefaultAllocator)
	b, err2 := tables.ReadParquet(filepath.Join(root, "single.tokens.parquet"), memory.DefaultAllocator)
	if err1 != nil || err2 != nil || !tables.SameRows(a, b) {
		t.Errorf("merged.tokens.parquet (%v) differs from the local run's (%v)", err1, err2)
	}
}
