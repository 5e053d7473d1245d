package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// Fake go, jupyter and gonb for `potato notebook install`: they log their calls, and do just what the
// command relies on (go build writes a gonb, go install a goimports, gonb --install a kernel spec).
const (
	fakeGo = `#!/bin/sh
echo "go $PWD GOBIN=$GOBIN $*" >> "$FAKE_LOG"
case "$1" in
env) echo "$FAKE_GOBIN"; echo "$FAKE_GOPATH" ;;
build) /bin/cp "$FAKE_DIR/gonb.sh" "$3" ;;
install) case "$FAKE_OFFLINE$GOPROXY" in 1file://*|file://*) ;; 1*) echo "go: module lookup disabled by GOPROXY=off" >&2; exit 1 ;; esac
	echo "installed with GOPROXY=$GOPROXY" >> "$FAKE_LOG"
	printf '#!/bin/sh\n' > "$GOBIN/goimports"; /bin/chmod +x "$GOBIN/goimports" ;;
esac
`
	fakeGonb = `#!/bin/sh
echo "gonb $PWD JUPYTER_DATA_DIR=$JUPYTER_DATA_DIR $*" >> "$FAKE_LOG"
[ -n "$FAKE_GONB_FAIL" ] && { echo "gonb: $FAKE_GONB_FAIL" >&2; exit 1; }
/bin/mkdir -p "$JUPYTER_DATA_DIR/kernels/gonb"
echo "{\"argv\": [\"$0\", \"--kernel\", \"{connection_file}\", \"$3\"], \"display_name\": \"Go (gonb)\", \"env\": {}, \"language\": \"go\"}" > "$JUPYTER_DATA_DIR/kernels/gonb/kernel.json"
`
	fakeJupyter = `#!/bin/sh
echo "jupyter $*" >> "$FAKE_LOG"
[ "$1" = "--data-dir" ] && echo "$FAKE_JUPYTER_DATA"
`
)

// fakeTools writes the fakes into a directory (go and jupyter only when asked), makes it the whole
// PATH, and returns it with a fake checkout of the module.
func fakeTools(t *testing.T, withGo, withJupyter bool) (dir, project string) {
	t.Helper()
	if runtime.GOOS == "windows" {
		t.Skip("the fake tools are shell scripts")
	}
	dir = t.TempDir()
	write := func(name, text string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write("gonb.sh", fakeGonb)
	if withGo {
		write("go", fakeGo)
	}
	if withJupyter {
		write("jupyter", fakeJupyter)
	}
	project = filepath.Join(t.TempDir(), "potato-k3")
	if err := os.MkdirAll(filepath.Join(project, "notebooks"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(project, "go.mod"), []byte("module github.com/potato-k3/potato-k3 // the project\n\ngo 1.26\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir)
	t.Setenv("FAKE_DIR", dir)
	t.Setenv("FAKE_LOG", filepath.Join(dir, "log"))
	t.Setenv("FAKE_GOBIN", "")
	t.Setenv("FAKE_GOPATH", filepath.Join(t.TempDir(), "gopath"))
	t.Setenv("FAKE_JUPYTER_DATA", filepath.Join(t.TempDir(), "jupyter-data"))
	t.Setenv("FAKE_GONB_FAIL", "")
	t.Setenv("FAKE_OFFLINE", "")
	t.Setenv("JUPYTER_DATA_DIR", "")
	return dir, project
}

// kernelSpec reads the kernel.json under the Jupyter data directory dir.
func kernelSpec(t *testing.T, dir string) (argv []string, env map[string]string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "kernels", "gonb", "kernel.json"))
	if err != nil {
		t.Fatal(err)
	}
	var spec struct {
		Argv []string          `json:"argv"`
		Env  map[string]string `json:"env"`
	}
	if err := json.Unmarshal(data, &spec); err != nil {
		t.Fatalf("kernel.json: %v\n%s", err, data)
	}
	return spec.Argv, spec.Env
}

// With no flags, the binaries go where go install puts them, the kernel spec where jupyter reads, and the
// spec runs the kernel with gonb, goimports and go on its PATH and a go.work that uses the checkout.
func TestNotebookInstallDefaults(t *testing.T) {
	fakes, project := fakeTools(t, true, true)
	t.Chdir(filepath.Join(project, "notebooks")) // found by walking up
	var out bytes.Buffer
	if err := run(context.Background(), []string{"notebook", "install"}, &out); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(os.Getenv("FAKE_GOPATH"), "bin")
	for _, name := range []string{"gonb", "goimports"} {
		if _, err := os.Stat(filepath.Join(bin, name)); err != nil {
			t.Errorf("%s not installed: %v", name, err)
		}
	}
	argv, env := kernelSpec(t, os.Getenv("FAKE_JUPYTER_DATA"))
	if want := "--go_work=" + project; !slices.Contains(argv, want) {
		t.Errorf("kernel argv %q, want %s among them", argv, want)
	}
	if want := bin + ":" + fakes + ":${PATH}"; env["PATH"] != want {
		t.Errorf("kernel PATH %q, want %q", env["PATH"], want)
	}
	// Offline and pinned cells; GoNB's log in a file, not the terminal.
	if env["GOPROXY"] != "off" || env["GOTOOLCHAIN"] != "local" {
		t.Errorf("kernel env %v, want GOPROXY=off and GOTOOLCHAIN=local", env)
	}
	logFile := filepath.Join(os.Getenv("FAKE_JUPYTER_DATA"), "kernels", "gonb", "gonb.log")
	for _, want := range []string{"-logtostderr=false", "-log_file=" + logFile, "-stderrthreshold=FATAL"} {
		if !slices.Contains(argv, want) {
			t.Errorf("kernel argv %q, want %s among them", argv, want)
		}
	}
	if slices.Contains(argv, "-logtostderr=true") {
		t.Errorf("kernel argv %q still logs to the terminal", argv)
	}
	log, err := os.ReadFile(filepath.Join(fakes, "log"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"go " + project + " GOBIN= mod download\n",
		"go " + project + " GOBIN= build -o " + filepath.Join(bin, "gonb") + " github.com/janpfeifer/gonb\n",
		"go " + project + " GOBIN=" + bin + " install golang.org/x/tools/cmd/goimports@" + goimportsVersion + "\n",
		"gonb " + project + " JUPYTER_DATA_DIR=" + os.Getenv("FAKE_JUPYTER_DATA") + " --install --force_deps --go_work=" + project + "\n",
	} {
		if !strings.Contains(string(log), want) {
			t.Errorf("no call %q in the log:\n%s", want, log)
		}
	}
	if want := filepath.Join(project, "notebooks", "quickstart.ipynb"); !strings.Contains(out.String(), want) {
		t.Errorf("output does not point to %s:\n%s", want, out.String())
	}
}

// --jupyter-dir, --bin and --project are obeyed, and jupyter is not asked where its data is.
func TestNotebookInstallFlags(t *testing.T) {
	fakes, project := fakeTools(t, true, true)
	jupyterDir, bin := t.TempDir(), filepath.Join(t.TempDir(), "bin")
	args := []string{"notebook", "install", "--jupyter-dir", jupyterDir, "--bin", bin, "--project", project}
	if err := run(context.Background(), args, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	argv, env := kernelSpec(t, jupyterDir)
	if argv[0] != filepath.Join(bin, "gonb") {
		t.Errorf("kernel runs %s, want %s", argv[0], filepath.Join(bin, "gonb"))
	}
	if !strings.HasPrefix(env["PATH"], bin+":") {
		t.Errorf("kernel PATH %q does not start with %s", env["PATH"], bin)
	}
	log, _ := os.ReadFile(filepath.Join(fakes, "log"))
	if strings.Contains(string(log), "jupyter --data-dir") {
		t.Errorf("asked jupyter for its data directory despite --jupyter-dir:\n%s", log)
	}
}

// Each missing piece is named, with what to do about it.
func TestNotebookInstallErrors(t *testing.T) {
	for _, tt := range []struct {
		name          string
		goCmd, jup    bool
		args          []string
		gonbFail, cwd string
		want          string
	}{
		{name: "no go", jup: true, want: "go is not on PATH: install Go 1.26"},
		{name: "no jupyter", goCmd: true, want: "jupyter is not on PATH: install it first"},
		{name: "other module", goCmd: true, jup: true, args: []string{"--project", "OTHER"}, want: "its go.mod is module example.com/other, want github.com/potato-k3/potato-k3"},
		{name: "no go.mod", goCmd: true, jup: true, args: []string{"--project", "EMPTY"}, want: "no go.mod there"},
		{name: "outside the checkout", goCmd: true, jup: true, cwd: "EMPTY", want: "is not inside the potato-k3 checkout"},
		{name: "gonb fails", goCmd: true, jup: true, gonbFail: "disk full", want: "registering the kernel with Jupyter: gonb --install"},
		{name: "extra argument", goCmd: true, jup: true, args: []string{"now"}, want: `unexpected argument "now"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, project := fakeTools(t, tt.goCmd, tt.jup)
			other, empty := t.TempDir(), t.TempDir()
			os.WriteFile(filepath.Join(other, "go.mod"), []byte("module example.com/other\n"), 0o644)
			t.Setenv("FAKE_GONB_FAIL", tt.gonbFail)
			t.Chdir(project)
			if tt.cwd == "EMPTY" {
				t.Chdir(empty)
			}
			args := []string{"notebook", "install", "--bin", t.TempDir(), "--jupyter-dir", t.TempDir()}
			for _, a := range tt.args {
				a = strings.NewReplacer("OTHER", other, "EMPTY", empty).Replace(a)
				args = append(args, a)
			}
			err := run(context.Background(), args, &bytes.Buffer{})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("potato %s: %v, want …%s…", strings.Join(args, " "), err, tt.want)
			}
			if tt.gonbFail != "" && err != nil && !strings.Contains(err.Error(), tt.gonbFail) {
				t.Errorf("the error does not carry gonb's output %q: %v", tt.gonbFail, err)
			}
		})
	}
}

func TestModulePath(t *testing.T) {
	for _, tt := range []struct{ gomod, want string }{
		{"module github.com/potato-k3/potato-k3\n\ngo 1.26\n", "github.com/potato-k3/potato-k3"},
		{"// comment\nmodule \"github.com/potato-k3/potato-k3\" // quoted\n", "github.com/potato-k3/potato-k3"},
		{"modules are here\n", ""},
		{"go 1.26\n", ""},
	} {
		path := filepath.Join(t.TempDir(), "go.mod")
		os.WriteFile(path, []byte(tt.gomod), 0o644)
		if got := modulePath(path); got != tt.want {
			t.Errorf("modulePath(%q) = %q, want %q", tt.gomod, got, tt.want)
		}
	}
	if got := modulePath(filepath.Join(t.TempDir(), "go.mod")); got != "" {
		t.Errorf("modulePath of a missing file = %q, want \"\"", got)
	}
}

// `potato notebook` alone explains itself; an unknown subcommand is an error.
func TestNotebookUsage(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), []string{"notebook"}, &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"potato notebook install", "--jupyter-dir", "quickstart.ipynb"} {
		if !strings.Contains(out.String(), strings.TrimPrefix(want, "-")) {
			t.Errorf("usage lacks %q:\n%s", want, out.String())
		}
	}
	if err := run(context.Background(), []string{"notebook", "uninstall"}, &out); err == nil || !strings.Contains(err.Error(), `unknown subcommand "uninstall"`) {
		t.Errorf("potato notebook uninstall: %v", err)
	}
}

// Offline, go install pkg@version fails on its deprecation lookup: goimports is then installed with the
// module cache's download tree as the proxy.
func TestNotebookInstallOffline(t *testing.T) {
	fakes, project := fakeTools(t, true, true)
	t.Setenv("FAKE_OFFLINE", "1")
	t.Setenv("FAKE_GOBIN", "")
	var out bytes.Buffer
	bin := t.TempDir()
	if err := run(context.Background(), []string{"notebook", "install", "--project", project, "--bin", bin, "--jupyter-dir", t.TempDir()}, &out); err != nil {
		t.Fatal(err)
	}
	log, err := os.ReadFile(filepath.Join(fakes, "log"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(log), "installed with GOPROXY=file://") {
		t.Errorf("goimports not installed from the module cache:\n%s", log)
	}
	if _, err := os.Stat(filepath.Join(bin, "goimports")); err != nil {
		t.Error(err)
	}
}
