//go:build !unix

package notebooks_test

import "os/exec"

const markerEnv = "POTATO_NOTEBOOK_TEST"

func ownGroup(*exec.Cmd) {}
func reap(string) []int  { return nil }
