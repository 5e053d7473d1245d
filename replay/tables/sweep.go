package tables

import (
	"path/filepath"

	"github.com/potato-k3/potato-k3/internal/staging"
)

// SweepSet removes what writers of the result set at path (as WriteSet's path) left when they were
// killed mid-write: their staging directories, each holding the tables written so far (gigabytes, for a
// large set). A set that a live process is writing is left alone, as is anything published. WriteSet
// sweeps before each write of a set; a set that is never written again (a service's job that died with
// its server) needs this call.
func SweepSet(path string) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	staging.Sweep(dir, "."+base+".", ".tmp")
}
