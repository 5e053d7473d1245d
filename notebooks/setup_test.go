package notebooks_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// EnvRequire makes the notebook test fail, instead of skipping, when jupyter or gonb is missing (CI sets it).
const EnvRequire = "POTATO_REQUIRE_NOTEBOOKS"

// harness is what TestMain prepares for the notebook runs.
type harness struct {
	root      string   // the module root (the checkout)
	tmp       string   // everything the runs write: binaries, cache, Jupyter directories, outputs
	nbconvert []string // the command that runs jupyter nbconvert
	env       []string // the environment of nbconvert, hence of the kernel and of each cell
	marker    string   // markerEnv=... in env: every process the runs start inherits it (see reap)
}

// errMissing wraps the reasons the notebooks cannot run on this machine (a skip unless EnvRequire).
var errMissing = errors.New("notebooks cannot run here")

// newHarness checks the tools, builds potato, and registers the GoNB kernel in a temporary Jupyter data
// directory whose go.work uses the checkout. The caller removes h.tmp.
func newHarness(ctx context.Context) (*harness, error) {
	root, err := filepath.Abs("..")
	if err != nil {
		return nil, err
	}
	nbconvert, err := findNbconvert()
	if err != nil {
		return nil, err
	}
	gonb, err := exec.LookPath("gonb")
	if err != nil {
		return nil, fmt.Errorf("%w: gonb is not on PATH (run `go run ./cmd/potato notebook install`)", errMissing)
	}
	goimports, err := exec.LookPath("goimports")
	if err != nil {
		return nil, fmt.Errorf("%w: goimports is not on PATH, and GoNB runs it on every cell (run `go run ./cmd/potato notebook install`)", errMissing)
	}
	goCmd, err := exec.LookPath("go")
	if err != nil {
		return nil, fmt.Errorf("%w: go is not on PATH, and GoNB compiles every cell with it", errMissing)
	}
	tmp, err := os.MkdirTemp("", "potato-notebooks-")
	if err != nil {
		return nil, err
	}
	h := &harness{root: root, tmp: tmp, nbconvert: nbconvert}
	if err := h.makeEnv(ctx, goCmd, gonb, goimports); err != nil {
		return h, err
	}

	if err := readSources(filepath.Join(root, "cmd", "potato")); err != nil {
		return h, err
	}
	// Every module go.mod pins must already be in the module cache: the runs have no network
	// (GOPROXY=off), as on a machine offline after set-up. go mod download checks it without fetching.
	if out, err := h.run(ctx, root, goCmd, "mod", "download"); err != nil {
		// missing set-up, as a missing tool is: a fresh clone's `go test ./...` fetched what the
		// packages import, not every module the notebooks' kernel needs
		return h, fmt.Errorf("%w: the module cache lacks modules go.mod pins, and the notebooks run offline "+
			"(run `go mod download` or `go run ./cmd/potato notebook install` once with network): %v\n%s", errMissing, err, tail(string(out), 10))
	}
	// One potato for every notebook, so that no cell falls back to `go run`; and the packages the cells
	// import, so that the compile cost (and any module download) lands here rather than in a cell.
	bin := filepath.Join(tmp, "bin", "potato")
	if out, err := h.run(ctx, root, goCmd, "build", "-o", bin, "./cmd/potato"); err != nil {
		return h, fmt.Errorf("building potato: %w\n%s", err, out)
	}
	if out, err := h.run(ctx, root, goCmd, "build", "./kernel/...", "./plotting", "./datasets", "gonum.org/v1/plot/plotutil"); err != nil {
		return h, fmt.Errorf("building the packages the notebooks import: %w\n%s", err, out)
	}
	h.env = append(h.env, "POTATO_BIN="+bin)

	// The set-up README gives, into the private Jupyter directory: the kernel spec (a go.work that uses
	// the checkout, GOPROXY=off, the log in a file), gonb and goimports rebuilt from the module cache.
	binDir := filepath.Join(tmp, "bin")
	// The goimports on PATH, for install to keep if it cannot build its own offline.
	if data, err := os.ReadFile(goimports); err == nil {
		os.WriteFile(filepath.Join(binDir, filepath.Base(goimports)), data, 0o755)
	}
	if out, err := h.run(ctx, root, bin, "notebook", "install", "--jupyter-dir", h.jupyterData(),
		"--bin", binDir, "--project", root); err != nil {
		return h, fmt.Errorf("potato notebook install: %w\n%s", err, out)
	}
	return h, nil
}

// makeEnv builds the environment of the runs: a temporary cache for the engine (it writes the tiny
// model fresh), private Jupyter directories, go and goimports on PATH, and HOME, GOCACHE, GOPATH and
// GOMODCACHE set (without them `go build` in a cell has no cache).
func (h *harness) makeEnv(ctx context.Context, goCmd, gonb, goimports string) error {
	env := map[string]string{}
	var order []string
	set := func(k, v string) {
		if _, ok := env[k]; !ok {
			order = append(order, k)
		}
		env[k] = v
	}
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		set(k, v)
	}
	if env["HOME"] == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			home = filepath.Join(h.tmp, "home")
		}
		set("HOME", home)
	}
	for _, k := range []string{"GOCACHE", "GOPATH", "GOMODCACHE"} {
		if env[k] != "" {
			continue
		}
		cmd := exec.CommandContext(ctx, goCmd, "env", k)
		cmd.Env = append(os.Environ(), "HOME="+env["HOME"])
		out, err := cmd.Output()
		if v := strings.TrimSpace(string(out)); err == nil && v != "" {
			set(k, v)
		} else {
			set(k, filepath.Join(h.tmp, strings.ToLower(k)))
		}
	}
	// The gonb and goimports that potato notebook install builds into tmp/bin come first.
	path := []string{filepath.Join(h.tmp, "bin"), filepath.Dir(gonb), filepath.Dir(goimports), filepath.Dir(goCmd)}
	if p := env["PATH"]; p != "" {
		path = append(path, p)
	}
	set("PATH", strings.Join(path, string(os.PathListSeparator)))
	// Offline and pinned: no module may be fetched (a cell that would fetch fails), go.mod files are not
	// rewritten, and go never downloads another toolchain. The notebooks turn GoNB's auto-get off in
	// their first cell (%noautoget); GOPROXY=off makes any fetch left an error rather than a download.
	set("GOPROXY", "off")
	set("GOTOOLCHAIN", "local")
	set("GOFLAGS", strings.TrimSpace(env["GOFLAGS"]+" -mod=readonly"))
	h.marker = markerEnv + "=" + filepath.Base(h.tmp)
	set(markerEnv, filepath.Base(h.tmp))
	set("POTATO_CACHE", filepath.Join(h.tmp, "cache"))
	delete(env, "POTATO_ADDR") // always the background engine on the embedded default
	delete(env, "POTATO_BIN")  // set to the potato built here
	set("JUPYTER_DATA_DIR", h.jupyterData())
	set("JUPYTER_CONFIG_DIR", filepath.Join(h.tmp, "jupyter", "config"))
	set("JUPYTER_RUNTIME_DIR", filepath.Join(h.tmp, "jupyter", "runtime"))
	delete(env, "JUPYTER_PATH") // only the kernel spec registered here
	h.env = nil
	for _, k := range order {
		if v, ok := env[k]; ok {
			h.env = append(h.env, k+"="+v)
		}
	}
	// kernel.Shutdown in this process must find the engine the notebooks started.
	return os.Setenv("POTATO_CACHE", env["POTATO_CACHE"])
}

// jupyterData is the private Jupyter data directory, where the kernel spec goes.
func (h *harness) jupyterData() string { return filepath.Join(h.tmp, "jupyter", "data") }

// readSources reads the Go files of dir. go test caches a passing result keyed by the test binary and
// by the files the test opened: the command's own package cannot be imported (deps_test.go imports the
// rest), so reading its files makes a change to them run the notebooks again.
func readSources(dir string) error {
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return err
	}
	for _, f := range files {
		if _, err := os.ReadFile(f); err != nil {
			return err
		}
	}
	return nil
}

// findNbconvert returns the command that runs jupyter nbconvert. Debian's jupyter runs Debian's own
// python3; another python3 first on PATH (pyenv, a virtualenv) often lacks nbformat, so Debian's is
// tried first.
func findNbconvert() ([]string, error) {
	if _, err := os.Stat("/usr/bin/python3"); err == nil {
		if exec.Command("/usr/bin/python3", "-c", "import nbconvert, nbclient").Run() == nil {
			return []string{"/usr/bin/python3", "-m", "nbconvert"}, nil
		}
	}
	if jupyter, err := exec.LookPath("jupyter"); err == nil {
		if exec.Command(jupyter, "nbconvert", "--version").Run() == nil {
			return []string{jupyter, "nbconvert"}, nil
		}
	}
	return nil, fmt.Errorf("%w: jupyter nbconvert is not installed (Debian: apt-get install --no-install-recommends "+
		"jupyter-nbconvert python3-nbclient jupyter-client)", errMissing)
}

// run runs name with args in dir with the harness environment, and returns its combined output.
func (h *harness) run(ctx context.Context, dir, name string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = h.env
	ownGroup(cmd)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.Bytes(), err
}

// execute runs the notebook at path top to bottom in a fresh kernel and returns the path of the executed
// copy. Cell errors do not stop the run (--allow-errors): the caller reports every one of them.
func (h *harness) execute(ctx context.Context, path string) (string, []byte, error) {
	outDir := filepath.Join(h.tmp, "out")
	name := filepath.Base(path)
	args := append(h.nbconvert[1:], "--to", "notebook", "--execute", "--allow-errors",
		"--ExecutePreprocessor.timeout=600", "--ExecutePreprocessor.record_timing=False",
		"--output-dir", outDir, "--output", name, path)
	start := time.Now()
	out, err := h.run(ctx, filepath.Dir(path), h.nbconvert[0], args...)
	if err != nil {
		return "", out, fmt.Errorf("nbconvert %s (after %s): %w", name, time.Since(start).Round(time.Second), err)
	}
	return filepath.Join(outDir, name), out, nil
}
