package api

import (
	"path/filepath"
	"runtime"
)

// SourceRoot is the directory of the potato-k3 checkout this program was compiled from: the background
// engine records it in its state file (State.Source), and a notebook's client compares it with its own,
// so that a notebook of one checkout does not silently use an engine another checkout built (the state
// file is one per user cache, not per checkout). It is "" where the build kept no file paths
// (go build -trimpath).
func SourceRoot() string {
	_, file, _, ok := runtime.Caller(0)
	if !ok || !filepath.IsAbs(file) {
		return ""
	}
	return filepath.Dir(filepath.Dir(filepath.Dir(file))) // file is ROOT/kernel/api/source.go
}
