//go:build !unix && !windows

package server

// diskFullErrnos is empty where the file system's errors are not known here: a full disk answers 500
// like any other failure to write.
var diskFullErrnos []error
