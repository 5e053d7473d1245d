//go:build !unix

package kernel

import (
	"errors"
	"syscall"
)

// errNoBackground is returned where this package cannot start a detached engine.
var errNoBackground = errors.New("kernel: starting a background engine needs a unix system: run potato serve and set POTATO_ADDR")

func detached() *syscall.SysProcAttr  { return nil }
func terminate(pid int) error         { return errNoBackground }
func terminateGroup(pid int)          {}
func alive(pid int) bool              { return false }
func lockFile(string) (func(), error) { return nil, errNoBackground }
func lockHeld(string) bool            { return false }
