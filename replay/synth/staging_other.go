//go:build !unix

package synth

import "os"

// holdOwner does nothing where flock is missing: no owner file is written.
func holdOwner(string) (*os.File, error) { return nil, nil }

// abandoned reports false where flock is missing: without it a live writer's staging directory cannot be
// told from a killed one's, so none is removed.
func abandoned(string) bool { return false }
