//go:build unix

package notebooks_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// markerEnv is set in the environment of every run (harness.marker). jupyter starts the kernel in a new
// session and kernel.Connect starts potato serve in another, so neither dies with nbconvert's process
// group; both inherit the environment, which is how reap finds them.
const markerEnv = "POTATO_NOTEBOOK_TEST"

// ownGroup runs cmd in a process group of its own and makes cancelling its context stop the whole group
// (nbconvert and anything it started that stayed in the group), not only nbconvert.
func ownGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
}

// reap stops every process whose environment holds marker (NAME=value), other than this one: the GoNB
// kernels, the cell programs and the background engines the notebook runs started. It sends SIGTERM,
// waits up to two seconds, then SIGKILL, and returns the pids it signalled. Only Linux lists a process's
// environment (/proc/PID/environ); elsewhere it finds nothing.
func reap(marker string) []int {
	want := []byte(marker)
	var pids []int
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		pid, err := strconv.Atoi(filepath.Base(d))
		if err != nil || pid == os.Getpid() {
			continue
		}
		env, err := os.ReadFile(filepath.Join(d, "environ"))
		if err != nil {
			continue // gone, or not ours to read
		}
		for _, kv := range bytes.Split(env, []byte{0}) {
			if bytes.Equal(kv, want) {
				pids = append(pids, pid)
				break
			}
		}
	}
	for _, pid := range pids {
		syscall.Kill(pid, syscall.SIGTERM)
	}
	deadline := time.Now().Add(2 * time.Second)
	for _, pid := range pids {
		for time.Now().Before(deadline) && syscall.Kill(pid, 0) == nil && !zombie(pid) {
			time.Sleep(50 * time.Millisecond)
		}
		if syscall.Kill(pid, 0) == nil && !zombie(pid) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	return pids
}

// zombie reports whether pid has exited and waits only to be reaped by its parent.
func zombie(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	// pid (comm) S ...: the state follows the last ')'
	if i := bytes.LastIndexByte(stat, ')'); i >= 0 && i+2 < len(stat) {
		return stat[i+2] == 'Z'
	}
	return false
}
