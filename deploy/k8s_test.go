package deploy_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// TestKubernetesManifest checks k8s/potato-indexed-job.yaml as far as a machine without a cluster can:
// kubectl needs an API server even for a client-side dry run, so the test checks the Indexed Job's shape
// instead. Always: the fields a dataset job relies on, by their lines. Where python3 has PyYAML: the
// parsed object (completions equal to both SHARDS, the volumes every mount names, a GPU limit), and the
// pod's two shell commands run with its mounts moved under a temporary directory and a stand-in potato
// (runPod): the staging follows links and is skipped for a complete shard, and potato receives --shard
// I/N, its own --out directory and --host-memory from the memory limit for a completion index (required
// with POTATO_REQUIRE_TOOLS=1, as in CI). Where kubectl is installed: `kubectl kustomize` parses it as
// a Kubernetes resource.
func TestKubernetesManifest(t *testing.T) {
	const path = "k8s/potato-indexed-job.yaml"
	text, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"apiVersion: batch/v1", "kind: Job", "completionMode: Indexed", "restartPolicy: OnFailure",
		`--shard "$JOB_COMPLETION_INDEX/$SHARDS"`, `--out "/results/shard-$JOB_COMPLETION_INDEX-of-$SHARDS/"`,
		"nvidia.com/gpu: 1", "claimName: FILL-IN-results", "emptyDir:",
	} {
		if !strings.Contains(string(text), want) {
			t.Errorf("%s lacks %q", path, want)
		}
	}
	completions := regexp.MustCompile(`(?m)^\s+completions: (\d+)`).FindStringSubmatch(string(text))
	shards := regexp.MustCompile(`name: SHARDS\n\s+value: "(\d+)"`).FindAllStringSubmatch(string(text), -1)
	if completions == nil || len(shards) != 2 {
		t.Errorf("spec.completions %v, SHARDS %v: want completions and SHARDS in both containers", completions, shards)
	}
	for _, m := range shards {
		if completions != nil && m[1] != completions[1] {
			t.Errorf("spec.completions %s and SHARDS %s must be one number", completions[1], m[1])
		}
	}

	if out, err := exec.Command("python3", "-c", "import yaml, json, sys; json.dump(yaml.safe_load(open(sys.argv[1])), sys.stdout)", path).Output(); err != nil {
		if os.Getenv("POTATO_REQUIRE_TOOLS") == "1" {
			t.Fatalf("no python3 with PyYAML (%v), and POTATO_REQUIRE_TOOLS=1: install python3-yaml (.ci/run does)", err)
		}
		t.Logf("no python3 with PyYAML (%v): the parsed checks are skipped", err)
	} else {
		checkJob(t, out)
	}
	if kubectl, err := exec.LookPath("kubectl"); err != nil {
		t.Log("no kubectl: the kustomize parse is skipped")
	} else {
		dir := t.TempDir()
		abs, _ := filepath.Abs(path)
		os.WriteFile(filepath.Join(dir, "job.yaml"), text, 0o644)
		os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte("resources:\n- job.yaml\n"), 0o644)
		cmd := exec.Command(kubectl, "kustomize", dir)
		cmd.Env = append(os.Environ(), "KUBECONFIG=/dev/null")
		if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "completionMode: Indexed") {
			t.Errorf("kubectl kustomize on %s: %v\n%s", abs, err, out)
		}
	}
}

// job is the part of a batch/v1 Job the test reads.
type job struct {
	Kind string `json:"kind"`
	Spec struct {
		CompletionMode string `json:"completionMode"`
		Completions    int    `json:"completions"`
		Parallelism    int    `json:"parallelism"`
		Template       struct {
			Spec struct {
				RestartPolicy  string      `json:"restartPolicy"`
				InitContainers []container `json:"initContainers"`
				Containers     []container `json:"containers"`
				Volumes        []struct {
					Name string `json:"name"`
				} `json:"volumes"`
			} `json:"spec"`
		} `json:"template"`
	} `json:"spec"`
}

type container struct {
	Name    string   `json:"name"`
	Image   string   `json:"image"`
	Command []string `json:"command"`
	Args    []string `json:"args"`
	Env     []struct {
		Name      string `json:"name"`
		Value     string `json:"value"`
		ValueFrom *struct {
			ResourceFieldRef *struct {
				ContainerName string `json:"containerName"`
				Resource      string `json:"resource"`
				Divisor       string `json:"divisor"`
			} `json:"resourceFieldRef"`
		} `json:"valueFrom"`
	} `json:"env"`
	Resources struct {
		Limits map[string]any `json:"limits"`
	} `json:"resources"`
	VolumeMounts []struct {
		Name      string `json:"name"`
		MountPath string `json:"mountPath"`
	} `json:"volumeMounts"`
}

func checkJob(t *testing.T, data []byte) {
	t.Helper()
	var j job
	if err := json.Unmarshal(data, &j); err != nil {
		t.Fatal(err)
	}
	s := j.Spec
	if j.Kind != "Job" || s.CompletionMode != "Indexed" || s.Completions < 1 || s.Parallelism < 1 || s.Parallelism > s.Completions {
		t.Errorf("kind %q, completionMode %q, completions %d, parallelism %d", j.Kind, s.CompletionMode, s.Completions, s.Parallelism)
	}
	pod := s.Template.Spec
	if pod.RestartPolicy != "OnFailure" {
		t.Errorf("restartPolicy %q, want OnFailure (a restart keeps the staged checkpoint)", pod.RestartPolicy)
	}
	volumes := map[string]bool{}
	for _, v := range pod.Volumes {
		volumes[v.Name] = true
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(pod.Containers))
	}
	for _, c := range append(pod.InitContainers, pod.Containers...) {
		for _, m := range c.VolumeMounts {
			if !volumes[m.Name] {
				t.Errorf("container %s mounts %s, which is not a volume", c.Name, m.Name)
			}
		}
	}
	c := pod.Containers[0]
	if c.Resources.Limits["nvidia.com/gpu"] == nil {
		t.Errorf("container %s has no GPU limit", c.Name)
	}
	if len(pod.InitContainers) != 1 {
		t.Fatalf("%d init containers, want 1 (the staging)", len(pod.InitContainers))
	}
	runPod(t, pod.InitContainers[0], c, strconv.Itoa(s.Completions))
}

// runPod runs a pod's staging init container and its potato container, as the kubelet would for
// completion index 2, with /model, /nvme and /results moved under a temporary directory and a stand-in
// potato that prints its arguments: first for a shard not begun (the checkpoint is staged, links
// followed, and potato reads the copy), then for one whose manifest says it is complete (nothing staged,
// potato reads the model volume and only checks the shard). completions is spec.completions.
func runPod(t *testing.T, stage, c container, completions string) {
	t.Helper()
	root := t.TempDir()
	mount := regexp.MustCompile(`(^|[\s"';=])(/(?:model|nvme|results|data))\b`)
	moved := func(cmd string) string { return mount.ReplaceAllString(cmd, "${1}"+root+"${2}") }
	// The model volume: a Hugging Face snapshot (a subPath of the cache, say) whose config.json links to
	// ../../blobs/, outside the volume.
	for _, d := range []string{"hub/snap", "blobs", "nvme", "results"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(root, "blobs", "b1"), []byte("{}"), 0o644)
	os.Symlink("../../blobs/b1", filepath.Join(root, "hub", "snap", "config.json"))
	os.Symlink(filepath.Join(root, "hub", "snap"), filepath.Join(root, "model"))
	bin := t.TempDir()
	os.WriteFile(filepath.Join(bin, "potato"), []byte("#!/bin/sh\nfor a in \"$@\"; do printf '%s\\n' \"$a\"; done\n"), 0o755)

	env := func(k container) []string {
		env := []string{"PATH=" + bin + ":" + os.Getenv("PATH"), "JOB_COMPLETION_INDEX=2"}
		for _, e := range k.Env {
			switch {
			case e.ValueFrom == nil:
				env = append(env, e.Name+"="+e.Value)
			case e.ValueFrom.ResourceFieldRef != nil && e.ValueFrom.ResourceFieldRef.Resource == "limits.memory" &&
				e.ValueFrom.ResourceFieldRef.Divisor == "1Mi" && e.ValueFrom.ResourceFieldRef.ContainerName == c.Name:
				env = append(env, e.Name+"="+strconv.FormatInt(mib(t, c.Resources.Limits["memory"]), 10))
			default:
				t.Errorf("container %s: env %s comes from where the test does not follow", k.Name, e.Name)
			}
		}
		for _, e := range env {
			if e == "SHARDS=" || (strings.HasPrefix(e, "SHARDS=") && e != "SHARDS="+completions) {
				t.Errorf("container %s: %s, spec.completions %s: they must be equal", k.Name, e, completions)
			}
		}
		return env
	}
	sh := func(k container) string {
		t.Helper()
		if len(k.Command) == 0 {
			t.Fatalf("container %s has no command", k.Name)
		}
		args := append([]string{}, k.Command[1:]...)
		for _, a := range k.Args {
			args = append(args, moved(a))
		}
		cmd := exec.Command(k.Command[0], args...)
		cmd.Env = env(k)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("container %s: %v\n%s", k.Name, err, out)
		}
		return strings.Join(strings.Split(strings.TrimSpace(string(out)), "\n"), " ")
	}
	sh(stage)
	if fi, err := os.Lstat(filepath.Join(root, "nvme", "model", "config.json")); err != nil {
		t.Errorf("the staged config.json: %v", err)
	} else if !fi.Mode().IsRegular() {
		t.Errorf("the staged config.json is %v; want the file its link points to, copied", fi.Mode())
	}
	shards := completions
	args := sh(c)
	for _, want := range []string{"replay ", "--model " + root + "/nvme/model ", "--shard 2/" + shards,
		"--out " + root + "/results/shard-2-of-" + shards + "/", "--backend cuda", "--chat " + root + "/data/",
		"--host-memory " + strconv.FormatInt(mib(t, c.Resources.Limits["memory"])*9/10, 10) + "MiB"} {
		if !strings.Contains(args, want) {
			t.Errorf("the container runs potato %s: no %q", args, want)
		}
	}

	// The Job applied again after the shard finished: a fresh pod, nothing staged.
	os.RemoveAll(filepath.Join(root, "nvme", "model"))
	dir := filepath.Join(root, "results", "shard-2-of-"+shards)
	os.MkdirAll(dir, 0o755)
	os.WriteFile(filepath.Join(dir, "manifest.json"), []byte("{\n \"complete\": true,\n \"parts\": []\n}\n"), 0o644)
	if out := sh(stage); !strings.Contains(out, "is complete") {
		t.Errorf("the staging of a complete shard says %q", out)
	}
	if _, err := os.Stat(filepath.Join(root, "nvme", "model", "config.json")); err == nil {
		t.Error("a complete shard's checkpoint was staged")
	}
	if args := sh(c); !strings.Contains(args, "--model "+root+"/model ") {
		t.Errorf("a complete shard runs potato %s: want --model on the model volume", args)
	}
}

// mib reads a Kubernetes memory quantity such as "400Gi" in MiB.
func mib(t *testing.T, q any) int64 {
	t.Helper()
	s, _ := q.(string)
	for suffix, n := range map[string]int64{"Mi": 1, "Gi": 1 << 10, "Ti": 1 << 20} {
		if v, ok := strings.CutSuffix(s, suffix); ok {
			if k, err := strconv.ParseInt(v, 10, 64); err == nil {
				return k * n
			}
		}
	}
	t.Fatalf("memory limit %v: want a number of Mi, Gi or Ti", q)
	return 0
}

// TestKubernetesMergeJob checks k8s/potato-merge-job.yaml: a Job of one pod on the results claim of the
// Indexed Job, with the same N, whose command (run with a stand-in potato) merges every shard-*-of-N
// directory under /results into /results/merged.parquet.
func TestKubernetesMergeJob(t *testing.T) {
	const path = "k8s/potato-merge-job.yaml"
	text, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	indexed, err := os.ReadFile("k8s/potato-indexed-job.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"apiVersion: batch/v1", "kind: Job", "restartPolicy: Never", "claimName: FILL-IN-results"} {
		if !strings.Contains(string(text), want) {
			t.Errorf("%s lacks %q", path, want)
		}
	}
	out, err := exec.Command("python3", "-c", "import yaml, json, sys; json.dump(yaml.safe_load(open(sys.argv[1])), sys.stdout)", path).Output()
	if err != nil {
		if os.Getenv("POTATO_REQUIRE_TOOLS") == "1" {
			t.Fatalf("no python3 with PyYAML (%v), and POTATO_REQUIRE_TOOLS=1: install python3-yaml (.ci/run does)", err)
		}
		t.Skipf("no python3 with PyYAML (%v): the parsed checks are skipped", err)
	}
	var j job
	if err := json.Unmarshal(out, &j); err != nil {
		t.Fatal(err)
	}
	pod := j.Spec.Template.Spec
	if j.Kind != "Job" || len(pod.Containers) != 1 || len(pod.Volumes) != 1 || pod.Volumes[0].Name != "results" {
		t.Fatalf("kind %q, %d containers, volumes %v: want a Job of one container on the results volume", j.Kind, len(pod.Containers), pod.Volumes)
	}
	c := pod.Containers[0]
	completions := regexp.MustCompile(`(?m)^\s+completions: (\d+)`).FindStringSubmatch(string(indexed))
	env, shards := []string{}, ""
	for _, e := range c.Env {
		env = append(env, e.Name+"="+e.Value)
		if e.Name == "SHARDS" {
			shards = e.Value
		}
	}
	n, err := strconv.Atoi(shards)
	if err != nil || completions == nil || shards != completions[1] {
		t.Fatalf("SHARDS %q; the Indexed Job's completions %v: they must be one number", shards, completions)
	}
	// /results moved under a temporary directory holding the shard directories of N = SHARDS and a stray.
	root := t.TempDir()
	var want []string
	for i := 0; i < n; i++ {
		d := filepath.Join(root, "results", "shard-"+strconv.Itoa(i)+"-of-"+shards)
		os.MkdirAll(d, 0o755)
		want = append(want, d)
	}
	os.MkdirAll(filepath.Join(root, "results", "shard-0-of-"+strconv.Itoa(n+1)), 0o755)
	bin := t.TempDir()
	os.WriteFile(filepath.Join(bin, "potato"), []byte("#!/bin/sh\nfor a in \"$@\"; do printf '%s\\n' \"$a\"; done\n"), 0o755)
	args := append([]string{}, c.Command[1:]...)
	for _, a := range c.Args {
		args = append(args, strings.ReplaceAll(a, "/results", root+"/results"))
	}
	cmd := exec.Command(c.Command[0], args...)
	cmd.Env = append(env, "PATH="+bin+":"+os.Getenv("PATH"))
	got, err := cmd.Output()
	if err != nil {
		t.Fatalf("the container's command: %v", err)
	}
	sort.Strings(want)
	if g, w := strings.TrimSpace(string(got)), strings.Join(append([]string{"merge", "--out", root + "/results/merged.parquet"}, want...), "\n"); g != w {
		t.Errorf("the container runs potato\n%s\nwant\n%s", g, w)
	}
}
