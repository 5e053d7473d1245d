//go:build !unix

package kernel

import "syscall"

func detached() *syscall.SysProcAttr { return nil }
func terminate(pid int) error        { return errNoBackground }
func terminateGroup(pid int)         {}
func alive(pid int) bool             { return false }
