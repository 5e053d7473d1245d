package server

import (
	"errors"
	"io/fs"
	"net/http"
	"os"

	"github.com/potato-k3/potato-k3/kernel/api"
)

// internalError is the answer to a failure of the server's own, not of the request: what failed and
// the system's reason, without the server's file paths (a client has no use for them and should not
// learn the layout of the server's disk; the caller logs the full error). A full disk or an exceeded
// quota is 507 Insufficient Storage rather than 500: the client can act on it (delete finished jobs,
// or wait for the operator) where a 500 only says that something broke.
func internalError(what string, err error) *httpError {
	status := http.StatusInternalServerError
	if diskFull(err) {
		status = http.StatusInsufficientStorage
	}
	return &httpError{status: status, msg: internalMessage(what, err)}
}

// internalMessage is internalError's text: on a full disk what the client can do about it, otherwise
// the operation and the system's error (pathFree) and where the rest is.
func internalMessage(what string, err error) string {
	if diskFull(err) {
		return what + ": the server's result disk is full: delete finished jobs you no longer need (DELETE " +
			api.PathJobs + "/ID), or ask the server's operator to free space"
	}
	return what + ": " + pathFree(err) + " (the server's log has the full error)"
}

// jobError is the error a job shows (GET /jobs/ID, and its manifest) when it fails for the server's own
// reason after its wave: internalMessage's text, never the paths that the error of the tables package
// or of os names (the job's spill directory and its staging folders), and that the job must be submitted
// again, since its results are gone. The caller logs the full error.
func jobError(what string, err error) string {
	return internalMessage(what, err) + "; its results are lost: submit it again"
}

// diskFull reports whether err is the file system's refusal for lack of space or quota
// (diskFullErrnos: ENOSPC and EDQUOT on Unix).
func diskFull(err error) bool {
	for _, e := range diskFullErrnos {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// pathFree is err's cause without the paths it names: the operation and the system's error of the
// *fs.PathError or *os.LinkError in its chain ("write: input/output error"). Any other error may
// carry a path in its text (the tables package names its files), so it reads only "internal error".
func pathFree(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Op + ": " + pe.Err.Error()
	}
	var le *os.LinkError
	if errors.As(err, &le) {
		return le.Op + ": " + le.Err.Error()
	}
	return "internal error"
}
