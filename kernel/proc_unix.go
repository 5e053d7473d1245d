//go:build unix

package kernel

import (
	"syscall"
)

// detached puts the background engine in a session of its own, so that it outlives the cell's process
// and no signal sent to the cell's process group (an interrupted cell) reaches it.
func detached() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setsid: true} }

// terminate asks process pid to stop gracefully.
func terminate(pid int) error { return syscall.Kill(pid, syscall.SIGTERM) }

// terminateGroup stops the session that start created (go run and the server it runs).
func terminateGroup(pid int) { syscall.Kill(-pid, syscall.SIGTERM) }

// alive reports whether process pid exists.
func alive(pid int) bool { return syscall.Kill(pid, 0) == nil }
