package deploy_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestKubernetesManifest checks k8s/potato-indexed-job.yaml as far as a machine without a cluster can:
// kubectl needs an API server even for a client-side dry run, so the test checks the Indexed Job's shape
// instead. Always: the fields a dataset job relies on, by their lines. Where python3 has PyYAML: the
// parsed object (completions equal to SHARDS, the volumes every mount names, a GPU limit), and the
// container's shell command run with a stand-in potato, which must receive --shard I/N and its own --out
// directory for a completion index (required with POTATO_REQUIRE_TOOLS=1, as in CI). Where kubectl is installed: `kubectl kustomize` parses it as a
// Kubernetes resource.
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
	shards := regexp.MustCompile(`name: SHARDS\n\s+value: "(\d+)"`).FindStringSubmatch(string(text))
	if completions == nil || shards == nil || completions[1] != shards[1] {
		t.Errorf("spec.completions %v and SHARDS %v must be one number", completions, shards)
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
		Name  string `json:"name"`
		Value string `json:"value"`
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
	env := os.Environ()
	shards := ""
	for _, e := range c.Env {
		env = append(env, e.Name+"="+e.Value)
		if e.Name == "SHARDS" {
			shards = e.Value
		}
	}
	if shards == "" || shards != strconv.Itoa(s.Completions) {
		t.Errorf("SHARDS %q, completions %d: they must be equal", shards, s.Completions)
	}
	// Run the container's command with a stand-in potato that prints its arguments, for index 2.
	bin := t.TempDir()
	os.WriteFile(filepath.Join(bin, "potato"), []byte("#!/bin/sh\nfor a in \"$@\"; do printf '%s\\n' \"$a\"; done\n"), 0o755)
	env = append(env, "PATH="+bin+":"+os.Getenv("PATH"), "JOB_COMPLETION_INDEX=2")
	if len(c.Command) == 0 {
		t.Fatal("the container has no command")
	}
	cmd := exec.Command(c.Command[0], append(c.Command[1:], c.Args...)...)
	cmd.Env = env
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("the container's command: %v", err)
	}
	args := strings.Join(strings.Split(strings.TrimSpace(string(out)), "\n"), " ")
	for _, want := range []string{"replay ", "--shard 2/" + shards, "--out /results/shard-2-of-" + shards + "/", "--backend cuda", "--chat /data/"} {
		if !strings.Contains(args, want) {
			t.Errorf("the container runs potato %s: no %q", args, want)
		}
	}
}
