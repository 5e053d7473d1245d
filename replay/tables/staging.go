package tables

import (
	"os"
	"path/filepath"
	"strings"
)

// stagingOwner is the file inside a set's staging directory whose flock says a live writer holds it.
const stagingOwner = ".owner"

// sweepStaging removes the staging directories that writers of the set at dir/base left when they were
// killed mid-write (".BASE.*.tmp", their owner's flock free): a killed replay of a large set would
// otherwise leave gigabytes beside its output for good. Directories a live writer holds are kept, and
// failures are ignored: the sweep is housekeeping, never a reason to refuse the new write.
func sweepStaging(dir, base string) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	prefix := "." + base + "."
	for _, e := range entries {
		n := e.Name()
		if !e.IsDir() || !strings.HasPrefix(n, prefix) || !strings.HasSuffix(n, ".tmp") {
			continue
		}
		if p := filepath.Join(dir, n); abandoned(p) {
			_ = os.RemoveAll(p)
		}
	}
}
