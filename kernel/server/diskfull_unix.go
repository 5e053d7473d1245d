//go:build unix

package server

import "syscall"

// diskFullErrnos are the errors of a write refused for lack of space (ENOSPC) or over a quota (EDQUOT).
var diskFullErrnos = []error{syscall.ENOSPC, syscall.EDQUOT}
