package kernel

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/potato-k3/potato-k3/kernel/api"
)

// The background engine's files, in the kernel directory of the cache.
const (
	stateName = "serve.json" // api.State, written by the server once it listens
	logName   = "serve.log"  // the server's output, truncated at each start
	sockName  = "serve.sock" // its unix socket (private to the user)
	lockName  = "start.lock" // held while a cell looks for or starts the engine
	spillName = "spill"      // its results (its own, so it never contends with a potato serve you run)
)

// maxSocketPath is a safe bound on a unix socket path (the kernel's limit is 104 to 108 bytes); past it
// the background engine listens on a free loopback port instead.
const maxSocketPath = 100

// errNoBackground is returned where this package cannot start a detached engine (proc_other.go).
var errNoBackground = errors.New("kernel: starting a background engine needs a unix system: run potato serve and set POTATO_ADDR")

// connectBackground reuses the background engine or starts one. Cells that run at once take turns
// through a lock, so that they start one engine between them.
func connectBackground(o options) (*Client, error) {
	dir, err := stateDir()
	if err != nil {
		return nil, err
	}
	unlock, err := lockFile(filepath.Join(dir, lockName))
	if err != nil {
		return nil, fmt.Errorf("kernel: %w", err)
	}
	defer unlock()
	if c, err := reuse(dir, o); c != nil || err != nil {
		return c, err
	}
	if o.noStart {
		return nil, fmt.Errorf("kernel: no engine is running: set %s, or let Connect start one", EnvAddr)
	}
	return start(dir, o)
}

// readState reads the state file of the kernel directory dir.
func readState(dir string) (api.State, error) {
	var st api.State
	data, err := os.ReadFile(filepath.Join(dir, stateName))
	if err != nil {
		return st, err
	}
	if err := json.Unmarshal(data, &st); err != nil {
		return st, fmt.Errorf("kernel: state file: %w", err)
	}
	return st, nil
}

// engineCheck is what probe found of the engine a state file names.
type engineCheck int

const (
	engineGone engineCheck = iota // no engine of this directory runs: the state file is stale
	engineUp                      // it answered its health check with the state's pid
	engineBusy                    // it is alive and holds its spill directory, but did not answer in time
)

// probe checks the engine st describes (in the kernel directory dir): a client of it and its health
// when it answers with st's pid. A health check that fails is not enough to call the engine gone: one
// busy or paused (SIGSTOP, a swapping machine) misses it, and forgetting it then would orphan it (a second
// engine cannot start on its spill directory, and Shutdown could no longer find it). It is gone only
// when its pid is not alive, when something else answers at its address, or when no process holds its
// spill directory's lock (the pid was reused by another program since).
func probe(dir string, st api.State, o options) (*Client, api.Health, engineCheck) {
	c, err := newClient(st.Addr, "", o.progress)
	if err != nil {
		return nil, api.Health{}, engineGone
	}
	ctx, cancel := context.WithTimeout(context.Background(), healthTimeout)
	defer cancel()
	h, err := c.Health(ctx)
	var se *ServerError
	switch {
	case err == nil && h.PID == st.PID:
		c.logPath = filepath.Join(dir, logName)
		return c, h, engineUp
	case err == nil, errors.As(err, &se): // another program answers at the address
		c.Close()
		return nil, h, engineGone
	}
	c.Close()
	if st.PID > 0 && alive(st.PID) && lockHeld(spillLock(dir)) {
		return nil, h, engineBusy
	}
	return nil, h, engineGone
}

// spillLock is the lock file the background engine holds on its spill directory for its whole life
// (kernel/server's lockSpill; it holds the engine's pid).
func spillLock(dir string) string { return filepath.Join(dir, spillName, ".lock") }

// reuse returns a client of the running background engine; nil and no error when there is none (a
// stale state file is removed).
func reuse(dir string, o options) (*Client, error) {
	st, err := readState(dir)
	if err != nil {
		return nil, nil
	}
	c, h, check := probe(dir, st, o)
	switch check {
	case engineGone:
		os.Remove(filepath.Join(dir, stateName))
		return nil, nil
	case engineBusy:
		return nil, fmt.Errorf("kernel: the engine (pid %d) did not answer within %s; it may be busy: retry, or kernel.Shutdown() to stop it (its log: %s)",
			st.PID, healthTimeout, filepath.Join(dir, logName))
	}
	if h.Status != "ok" { // it holds its spill directory until it exits: a second one could not start
		c.Close()
		return nil, fmt.Errorf("kernel: the background engine (pid %d) is stopping; connect again once it has", st.PID)
	}
	if o.model != "" && !sameDir(o.model, st.Model) {
		c.Close()
		return nil, fmt.Errorf("kernel: the background engine (pid %d) runs %s, not %s: call kernel.Shutdown() first", st.PID, st.Model, o.model)
	}
	if mine := api.SourceRoot(); st.Source != "" && mine != "" && !sameDir(st.Source, mine) {
		// Not an error: the engine answers as it should, only from another checkout's code (an older
		// one, or one with edits), which a cell cannot see in its results.
		w := o.progress
		if w == nil {
			w = os.Stderr // a GoNB cell shows its stderr
		}
		fmt.Fprintf(w, "kernel: the background engine (pid %d) was built from the checkout at %s, this program from %s: "+
			"its results are that checkout's code. kernel.Shutdown(), then connect again, starts this one's.\n", st.PID, st.Source, mine)
	}
	return c, nil
}

// sameDir reports whether two paths name one directory.
func sameDir(a, b string) bool {
	fa, errA := os.Stat(a)
	fb, errB := os.Stat(b)
	return errA == nil && errB == nil && os.SameFile(fa, fb)
}

// start runs `potato serve` detached in its own session (it outlives the cell), its output to the log
// file, and waits until it answers.
func start(dir string, o options) (*Client, error) {
	bin, args, from, err := findPotato()
	if err != nil {
		return nil, err
	}
	// `go run` compiles the engine before it can answer: silent, 10 s and more with a warm build cache,
	// a minute or two with a cold one. Say so, or the cell looks hung.
	goRun, hint := len(args) > 0, ""
	if goRun {
		w := o.progress
		if w == nil {
			w = os.Stderr // a GoNB cell shows its stderr
		}
		fmt.Fprintf(w, "kernel: no potato binary (%s, beside this program, or on PATH): compiling the engine with `go run %s` before it starts, a minute or two on a cold build cache (to skip this, %s)\n",
			EnvBin, potatoPkg, binHint)
		hint = "; it was run as `go run " + potatoPkg + "`, which works only inside the potato-k3 module or a go.work that uses it: " + binHint
	}
	if from == EnvBin {
		hint = " (it is $" + EnvBin + ", " + bin + ")"
	}
	statePath, logPath := filepath.Join(dir, stateName), filepath.Join(dir, logName)
	listen := "unix:" + filepath.Join(dir, sockName)
	if len(listen) > maxSocketPath {
		listen = "127.0.0.1:0"
	}
	args = append(args, "serve", "--listen", listen, "--state-file", statePath, "--spill", filepath.Join(dir, spillName))
	if o.model != "" {
		abs, err := filepath.Abs(o.model)
		if err != nil {
			return nil, fmt.Errorf("kernel: %w", err)
		}
		args = append(args, "--model", abs)
	}
	// An engine that still holds the spill directory, though the state file no longer names it, would
	// make the new one fail at once; and the log about to be truncated is that engine's.
	if lockHeld(spillLock(dir)) {
		holder, _ := os.ReadFile(spillLock(dir))
		return nil, fmt.Errorf("kernel: another engine (pid %s) holds %s but does not answer as the background engine: stop it, then connect again; %s",
			strings.TrimSpace(string(holder)), filepath.Join(dir, spillName), logTail(logPath))
	}
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("kernel: %w", err)
	}
	fmt.Fprintf(logf, "# %s %s\n# started by pid %d at %s\n", bin, strings.Join(args, " "), os.Getpid(), time.Now().Format(time.RFC3339))
	os.Remove(statePath)
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = detached()
	err = cmd.Start()
	logf.Close() // the child has its own descriptor
	if err != nil {
		if from == EnvBin { // the path is the user's setting, not ours: say where it came from
			return nil, fmt.Errorf("kernel: starting %s (named by $%s): %w: set %s to a built potato (`go build -o potato ./cmd/potato` in a checkout of potato-k3), or unset it to use one beside this program or on PATH",
				bin, EnvBin, err, EnvBin)
		}
		return nil, fmt.Errorf("kernel: starting %s (%s): %w", bin, from, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }() // reaps it if it dies while this process lives
	deadline := time.NewTimer(o.startTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-exited:
			return nil, fmt.Errorf("kernel: potato serve exited (%v) before it answered%s; %s", err, hint, logTail(logPath))
		case <-deadline.C:
			terminateGroup(cmd.Process.Pid)
			return nil, fmt.Errorf("kernel: potato serve did not answer within %s%s; %s", o.startTimeout, hint, logTail(logPath))
		case <-tick.C:
		}
		if st, err := readState(dir); err == nil {
			if c, _, check := probe(dir, st, o); check == engineUp {
				return c, nil
			}
		}
	}
}

// potatoPkg is the engine's command, which findPotato's last resort runs with `go run`.
const potatoPkg = "github.com/potato-k3/potato-k3/cmd/potato"

// binHint says how to give Connect a built engine instead of `go run`.
const binHint = "set " + EnvBin + " to a built potato (`go build -o potato ./cmd/potato` in a checkout of potato-k3), or put one on PATH"

// findPotato finds the potato command: $POTATO_BIN, a potato next to the running executable, potato on
// PATH, or else `go run github.com/potato-k3/potato-k3/cmd/potato` (which needs go on PATH and the
// module in the current module or workspace, as a GoNB cell with --go_work has it; it compiles first,
// so the first start is slow). Only the last returns arguments. from says where the command was found,
// for an error when it does not start: EnvBin when $POTATO_BIN named it, else a few words. It is an
// error only when none is found and go is not on PATH either.
func findPotato() (bin string, args []string, from string, err error) {
	if bin := os.Getenv(EnvBin); bin != "" {
		return bin, nil, EnvBin, nil
	}
	if exe, err := os.Executable(); err == nil {
		next := filepath.Join(filepath.Dir(exe), "potato")
		if fi, err := os.Stat(next); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 && next != exe {
			return next, nil, "found beside this program", nil
		}
	}
	if bin, err := exec.LookPath("potato"); err == nil {
		return bin, nil, "found on PATH", nil
	}
	if gobin, err := exec.LookPath("go"); err == nil {
		return gobin, []string{"run", potatoPkg}, "go on PATH, to run " + potatoPkg, nil
	}
	return "", nil, "", fmt.Errorf("kernel: no potato command: %s (or install go)", binHint)
}

// logTail is the last lines of the log at path, for an error message.
func logTail(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return "no log: " + err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > 20 {
		lines = lines[len(lines)-20:]
	}
	return "last lines of " + path + ":\n" + strings.Join(lines, "\n")
}

// Shutdown stops the background engine that Connect started (found through its state file), after the
// wave in flight; its finished results stay on disk for the next one. It does nothing when none runs,
// and never signals a process that is not that engine: one that answers with the state's pid, or, when
// it does not answer in time (busy, or paused), whose pid is alive and holds the engine's spill directory.
// It is an error when the cache directory or its state file cannot be read, when the engine cannot be
// signalled, and when it has not exited two minutes after the signal (the error says how to stop it).
func Shutdown() error {
	dir, err := stateDir()
	if err != nil {
		return err
	}
	// The start lock, as Connect takes it: a Connect starting the engine at this instant finishes first,
	// and one that comes while this waits for the engine to exit waits too, rather than find it stopping.
	unlock, err := lockFile(filepath.Join(dir, lockName))
	switch {
	case err == nil:
		defer unlock()
	case !errors.Is(err, errNoBackground):
		return fmt.Errorf("kernel: %w", err)
	}
	st, err := readState(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	c, _, check := probe(dir, st, options{})
	if c != nil {
		c.Close()
	}
	if check == engineGone {
		os.Remove(filepath.Join(dir, stateName))
		return nil
	}
	if err := terminate(st.PID); err != nil {
		return fmt.Errorf("kernel: stopping the engine (pid %d): %w", st.PID, err)
	}
	const wait = 2 * time.Minute
	for deadline := time.Now().Add(wait); time.Now().Before(deadline); {
		if !alive(st.PID) {
			// The engine removes its own state file as it exits; one killed, or not an engine at all
			// (a test's stand-in), leaves it, and it must not name a pid that may be reused.
			if now, err := readState(dir); err == nil && now.PID == st.PID {
				os.Remove(filepath.Join(dir, stateName))
			}
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("kernel: the engine (pid %d) has not stopped within %s: it stops after its wave, unless it is paused or stuck (kill -CONT %d, or kill -KILL %d); %s",
		st.PID, wait, st.PID, st.PID, logTail(filepath.Join(dir, logName)))
}
