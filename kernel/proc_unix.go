//go:build unix

package kernel

import (
	"errors"
	"syscall"
)

// detached puts the background engine in a session of its own, so that it outlives the cell's process
// and no signal sent to the cell's process group (an interrupted cell) reaches it.
func detached() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setsid: true} }

// terminate asks process pid to stop gracefully.
func terminate(pid int) error { return syscall.Kill(pid, syscall.SIGTERM) }

// terminateGroup stops the session that start created (go run and the server it runs).
func terminateGroup(pid int) { syscall.Kill(-pid, syscall.SIGTERM) }

// alive reports whether process pid exists: a process of another user answers the probe with EPERM, and
// is alive all the same (a claim of the results cache held by it is not stale).
func alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
