//go:build !unix

package tables

// holdStaging does nothing where flock is missing.
func holdStaging(tmp string) (release func(), err error) { return func() {}, nil }

// abandoned reports false where flock is missing: without it a live writer's staging directory cannot be
// told from a killed one's, so none is removed.
func abandoned(tmp string) bool { return false }
