package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
)

func init() {
	commands["notebook"] = command{"set up Go notebooks: `potato notebook install` installs the GoNB Jupyter kernel", runNotebook}
}

// What `potato notebook install` installs. GoNB is pinned by this module's go.mod (a tool directive), so
// it is built from the checkout: the Go proxy refuses gonb@latest. goimports is required by GoNB at run
// time (it fixes every cell's imports); it is not a dependency of the module, so it is installed by version.
const (
	projectModule    = "github.com/potato-k3/potato-k3"
	gonbPackage      = "github.com/janpfeifer/gonb" // v0.11.5, from go.mod
	gonbVersion      = "v0.11.5"
	goimportsPackage = "golang.org/x/tools/cmd/goimports"
	goimportsVersion = "v0.52.0"
)

// notebookUsage is the help of `potato notebook`.
const notebookUsage = `usage: potato notebook install [--jupyter-dir DIR] [--bin DIR] [--project DIR]

Downloads every module this checkout's go.mod pins (notebook cells then build offline against exactly
those versions), installs the GoNB Jupyter kernel (gonb ` + gonbVersion + `, built from this checkout's go.mod) and goimports
(` + goimportsVersion + `, which GoNB runs on every cell), then registers the kernel with Jupyter so that every
notebook starts with a go.work that uses this checkout: cells import github.com/potato-k3/potato-k3/...
with no setup cell, with GOPROXY=off (no cell fetches a module) and GoNB's log in gonb.log beside the kernel
spec. Needs go and jupyter on PATH, and the network once.

Then open notebooks/quickstart.ipynb in Jupyter, pick the kernel "Go (gonb)" and run all cells.

flags:
`

// runNotebook dispatches `potato notebook SUBCOMMAND`.
func runNotebook(ctx context.Context, args []string, stdout io.Writer) error {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprint(stdout, notebookUsage)
		fs := newNotebookFlags(&notebookInstall{})
		fs.SetOutput(stdout)
		printFlags(fs)
		return nil
	}
	if args[0] != "install" {
		return usagef("notebook", "notebook: unknown subcommand %q (want install)", args[0])
	}
	in := &notebookInstall{out: stdout}
	fs := newNotebookFlags(in)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), notebookUsage)
		printFlags(fs)
	}
	if err := parseFlags(fs, args[1:], stdout); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("notebook", "notebook install: unexpected argument %q", fs.Arg(0))
	}
	if err := in.run(ctx); err != nil {
		return fmt.Errorf("notebook install: %w", err)
	}
	return nil
}

// newNotebookFlags returns the flag set of `potato notebook install`, bound to in.
func newNotebookFlags(in *notebookInstall) *flag.FlagSet {
	fs := flag.NewFlagSet("notebook install", flag.ContinueOnError)
	fs.StringVar(&in.jupyterDir, "jupyter-dir", "", "Jupyter data directory for the kernel spec (default: $JUPYTER_DATA_DIR, else the one jupyter --data-dir names)")
	fs.StringVar(&in.binDir, "bin", "", "directory for the gonb and goimports binaries (default: $(go env GOBIN), else $(go env GOPATH)/bin)")
	fs.StringVar(&in.project, "project", "", "the potato-k3 checkout notebooks use (default: the one holding the current directory)")
	return fs
}

// notebookInstall is one run of `potato notebook install`.
type notebookInstall struct {
	jupyterDir, binDir, project string
	out                         io.Writer

	goCmd   string // the go command, from PATH
	jupyter string // the jupyter command, from PATH
}

// run installs gonb and goimports into binDir and the kernel spec into the Jupyter data directory.
func (in *notebookInstall) run(ctx context.Context) error {
	var err error
	if in.goCmd, err = exec.LookPath("go"); err != nil {
		return errors.New("go is not on PATH: install Go 1.26 or later (https://go.dev/dl); GoNB compiles every cell with it")
	}
	if in.jupyter, err = exec.LookPath("jupyter"); err != nil {
		return errors.New("jupyter is not on PATH: install it first (Debian or Ubuntu: " +
			"sudo apt-get install --no-install-recommends jupyter-notebook; elsewhere: pip install notebook), then run potato notebook install again")
	}
	if in.project == "" {
		wd, err := os.Getwd()
		if err != nil {
			return err
		}
		if in.project, err = findProject(wd); err != nil {
			return err
		}
	} else if err := checkProject(in.project); err != nil {
		return err
	}
	if in.project, err = filepath.Abs(in.project); err != nil {
		return err
	}
	if in.binDir == "" {
		if in.binDir, err = in.defaultBinDir(ctx); err != nil {
			return err
		}
	}
	if in.binDir, err = filepath.Abs(in.binDir); err != nil {
		return err
	}
	if err := os.MkdirAll(in.binDir, 0o755); err != nil {
		return err
	}
	if in.jupyterDir == "" {
		in.jupyterDir = in.defaultJupyterDir(ctx)
	}
	if in.jupyterDir, err = filepath.Abs(in.jupyterDir); err != nil {
		return err
	}
	fmt.Fprintf(in.out, "project    %s\n", in.project)

	// Every module go.mod pins, into the module cache: notebook cells build offline against exactly these
	// versions (the kernel runs with GOPROXY=off), and so does go test ./... afterwards.
	if _, err := in.command(ctx, in.project, nil, in.goCmd, "mod", "download"); err != nil {
		return fmt.Errorf("downloading the modules go.mod pins (cells build offline against them): %w", err)
	}
	fmt.Fprintf(in.out, "modules    every module go.mod pins, in $(go env GOMODCACHE)\n")

	gonb := filepath.Join(in.binDir, exeName("gonb"))
	if _, err := in.command(ctx, in.project, nil, in.goCmd, "build", "-o", gonb, gonbPackage); err != nil {
		return fmt.Errorf("building GoNB from %s/go.mod: %w", in.project, err)
	}
	fmt.Fprintf(in.out, "gonb       %s (%s)\n", gonb, gonbVersion)

	goimports := filepath.Join(in.binDir, exeName("goimports"))
	if _, err := in.installGoimports(ctx); err != nil {
		if _, statErr := os.Stat(goimports); statErr != nil {
			return fmt.Errorf("installing goimports (GoNB runs it on every cell): %w", err)
		}
		fmt.Fprintf(in.out, "warning: could not install goimports %s (%v); keeping the one in %s\n", goimportsVersion, err, in.binDir)
	}
	fmt.Fprintf(in.out, "goimports  %s (%s)\n", goimports, goimportsVersion)

	// gonb --install writes kernels/gonb/kernel.json under JUPYTER_DATA_DIR, with --go_work among the
	// kernel's arguments: every notebook then starts with a go.work that uses the project.
	// --force_deps: gopls (completion only) is optional here.
	env := []string{"JUPYTER_DATA_DIR=" + in.jupyterDir, "PATH=" + in.kernelPath(os.Getenv("PATH"))}
	if _, err := in.command(ctx, in.project, env, gonb, "--install", "--force_deps", "--go_work="+in.project); err != nil {
		return fmt.Errorf("registering the kernel with Jupyter: %w", err)
	}
	spec := filepath.Join(in.jupyterDir, "kernels", "gonb", "kernel.json")
	logPath := filepath.Join(filepath.Dir(spec), "gonb.log")
	if err := setKernelSpec(spec, in.kernelPath("${PATH}"), logPath); err != nil {
		return err
	}
	fmt.Fprintf(in.out, "kernel     %s (\"Go (gonb)\"; go.work uses %s)\n", spec, in.project)
	fmt.Fprintf(in.out, "\nnext: jupyter notebook --no-browser --allow-root %s\n      (open the URL it prints; pick the kernel \"Go (gonb)\" if asked, then run all cells;\n      --allow-root only matters as root, --no-browser on a machine without a desktop)\n",
		filepath.Join(in.project, "notebooks", "quickstart.ipynb"))
	return nil
}

// installGoimports installs goimports at goimportsVersion into binDir. Offline, go install pkg@version
// fails even with the module in the cache (it looks up the module's deprecation on the proxy): it then
// tries again with the module cache's own download tree as the proxy, which answers those lookups from
// what an earlier install fetched (and verified).
func (in *notebookInstall) installGoimports(ctx context.Context) ([]byte, error) {
	gobin := "GOBIN=" + in.binDir
	out, err := in.command(ctx, in.project, []string{gobin}, in.goCmd, "install", goimportsPackage+"@"+goimportsVersion)
	if err == nil {
		return out, nil
	}
	env, envErr := in.command(ctx, "", nil, in.goCmd, "env", "GOMODCACHE")
	modcache := strings.TrimSpace(string(env))
	if envErr != nil || modcache == "" {
		return nil, err
	}
	proxy := "GOPROXY=file://" + filepath.ToSlash(filepath.Join(modcache, "cache", "download"))
	if out, err2 := in.command(ctx, in.project, []string{gobin, proxy}, in.goCmd, "install", goimportsPackage+"@"+goimportsVersion); err2 == nil {
		return out, nil
	}
	return nil, err
}

// defaultBinDir is where `go install` puts binaries: $(go env GOBIN), else $(go env GOPATH)/bin.
func (in *notebookInstall) defaultBinDir(ctx context.Context) (string, error) {
	out, err := in.command(ctx, "", nil, in.goCmd, "env", "GOBIN", "GOPATH")
	if err != nil {
		return "", err
	}
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	if len(lines) >= 1 && strings.TrimSpace(lines[0]) != "" {
		return strings.TrimSpace(lines[0]), nil
	}
	if len(lines) >= 2 && strings.TrimSpace(lines[1]) != "" {
		first, _, _ := strings.Cut(strings.TrimSpace(lines[1]), string(os.PathListSeparator))
		return filepath.Join(first, "bin"), nil
	}
	return "", errors.New("go env gives neither GOBIN nor GOPATH: pass --bin DIR")
}

// defaultJupyterDir is $JUPYTER_DATA_DIR, else the data directory the user's jupyter reads, else
// GoNB's own default (the same on Linux: ~/.local/share/jupyter).
func (in *notebookInstall) defaultJupyterDir(ctx context.Context) string {
	if d := os.Getenv("JUPYTER_DATA_DIR"); d != "" {
		return d
	}
	if out, err := in.command(ctx, "", nil, in.jupyter, "--data-dir"); err == nil {
		if d := strings.TrimSpace(string(out)); d != "" && !strings.Contains(d, "\n") {
			return d
		}
	}
	home, _ := os.UserHomeDir()
	switch runtime.GOOS {
	case "darwin":
		return filepath.Join(home, "Library", "Jupyter")
	case "windows":
		return filepath.Join(os.Getenv("APPDATA"), "jupyter")
	}
	return filepath.Join(home, ".local", "share", "jupyter")
}

// kernelPath is the PATH the kernel runs with: the directory of gonb and goimports, then go's, then rest.
// GoNB calls both go and goimports for every cell; a Jupyter started from a desktop menu may not have
// them on its PATH.
func (in *notebookInstall) kernelPath(rest string) string {
	dirs := []string{in.binDir}
	if d := filepath.Dir(in.goCmd); d != in.binDir {
		dirs = append(dirs, d)
	}
	return strings.Join(append(dirs, rest), string(os.PathListSeparator))
}

// kernelEnv is the environment the kernel spec adds, besides PATH. Cells resolve modules only from the
// go.work (this checkout, hence its go.mod's versions) and the module cache: GOPROXY=off makes a cell
// that would fetch a module fail instead of downloading a newer version than go.mod pins (GoNB's
// auto-get runs go get after every cell; the notebooks also turn it off with %noautoget), and
// GOTOOLCHAIN=local keeps go from fetching another toolchain.
var kernelEnv = map[string]string{"GOPROXY": "off", "GOTOOLCHAIN": "local"}

// quietLog are the klog flags the kernel runs with: its log goes to a file beside the kernel spec
// (capped at 10 MB) instead of the terminal that runs jupyter, where every kernel start printed
// errors that are none ("gopls is not installed": completion only).
func quietLog(logPath string) []string {
	return []string{"-logtostderr=false", "-alsologtostderr=false", "-log_file=" + logPath, "-log_file_max_size=10", "-stderrthreshold=FATAL"}
}

// setKernelSpec sets PATH (to value) and kernelEnv in the env of the kernel spec at path, and replaces
// the logging flags of its command line with quietLog's, keeping whatever else GoNB wrote. Jupyter
// (jupyter_client 7 and later) replaces ${PATH} there with its own PATH when it starts the kernel.
func setKernelSpec(path, value, logPath string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("gonb wrote no kernel spec: %w", err)
	}
	var spec map[string]any
	if err := json.Unmarshal(data, &spec); err != nil {
		return fmt.Errorf("kernel spec %s: %w", path, err)
	}
	env, _ := spec["env"].(map[string]any)
	if env == nil {
		env = map[string]any{}
	}
	env["PATH"] = value
	for k, v := range kernelEnv {
		env[k] = v
	}
	spec["env"] = env
	if argv, ok := spec["argv"].([]any); ok {
		var kept []any
		for _, a := range argv {
			s, _ := a.(string)
			name, _, _ := strings.Cut(strings.TrimLeft(s, "-"), "=")
			switch name {
			case "logtostderr", "alsologtostderr", "log_file", "log_dir", "log_file_max_size", "stderrthreshold":
				continue
			}
			kept = append(kept, a)
		}
		for _, f := range quietLog(logPath) {
			kept = append(kept, f)
		}
		spec["argv"] = kept
	}
	out, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(out, '\n'), 0o644)
}

// command runs name with args in dir (the current directory when ""), with extra variables added to the
// environment, and returns its standard output. On failure the error holds the end of its output.
func (in *notebookInstall) command(ctx context.Context, dir string, extra []string, name string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), extra...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(tail(stderr.String()+stdout.String(), 20))
		return nil, fmt.Errorf("%s %s: %w\n%s", filepath.Base(name), strings.Join(args, " "), err, msg)
	}
	return stdout.Bytes(), nil
}

// tail is the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// exeName adds .exe on Windows.
func exeName(name string) string {
	if runtime.GOOS == "windows" {
		return name + ".exe"
	}
	return name
}

// findProject returns the directory at or above dir whose go.mod declares the potato-k3 module.
func findProject(dir string) (string, error) {
	for d := dir; ; {
		if modulePath(filepath.Join(d, "go.mod")) == projectModule {
			return d, nil
		}
		parent := filepath.Dir(d)
		if parent == d {
			return "", fmt.Errorf("%s is not inside the potato-k3 checkout (no go.mod of module %s there or above): "+
				"run potato notebook install from the checkout, or pass --project DIR", dir, projectModule)
		}
		d = parent
	}
}

// checkProject says why dir is not the potato-k3 checkout, if it is not.
func checkProject(dir string) error {
	if got := modulePath(filepath.Join(dir, "go.mod")); got != projectModule {
		if got == "" {
			return fmt.Errorf("--project %s: no go.mod there; want the potato-k3 checkout", dir)
		}
		return fmt.Errorf("--project %s: its go.mod is module %s, want %s", dir, got, projectModule)
	}
	return nil
}

// modulePath is the module path declared in the go.mod file at path; "" when it cannot be read.
func modulePath(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if rest, ok := strings.CutPrefix(line, "module"); ok && (rest == "" || rest[0] == ' ' || rest[0] == '\t') {
			rest, _, _ = strings.Cut(rest, "//")
			return strings.Trim(strings.TrimSpace(rest), `"`)
		}
	}
	return ""
}
