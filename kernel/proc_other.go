//go:build !unix

package kernel

import "syscall"

func detached() *syscall.SysProcAttr  { return nil }
func terminate(pid int) error         { return errNoBackground }
func terminateGroup(pid int)          {}
func alive(pid int) bool              { return false }
func lockFile(string) (func(), error) { return nil, errNoBackground }
func lockHeld(string) bool            { return false }
