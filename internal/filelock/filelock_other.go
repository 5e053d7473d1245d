//go:build !unix

package filelock

const supported = false

func lock(string, uint32, bool) (*Lock, error) { return &Lock{}, nil }
func held(string) bool                         { return false }
func abandoned(string) bool                    { return false }
