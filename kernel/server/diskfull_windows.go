package server

import "syscall"

// diskFullErrnos are the errors of a write refused for lack of space or over a quota. Windows reports
// its own codes, not the ENOSPC and EDQUOT that package syscall defines for it (winerror.h:
// ERROR_HANDLE_DISK_FULL 39, ERROR_DISK_FULL 112, ERROR_DISK_QUOTA_EXCEEDED 1295).
var diskFullErrnos = []error{syscall.Errno(39), syscall.Errno(112), syscall.Errno(1295)}
