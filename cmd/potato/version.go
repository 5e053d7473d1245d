package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/potato-k3/potato-k3/replay"
	"github.com/potato-k3/potato-k3/replay/synth"
	"github.com/potato-k3/potato-k3/replay/tables"
)

func init() {
	commands["version"] = command{"print the engine, table schema and generator versions and the build", runVersion}
}

// runVersion prints what results depend on: the engine version (recorded in every table as
// potato.engine_version), the tables' schema version, the synthetic generator's version, and the build
// (Go version, and the commit when built from a checkout).
func runVersion(_ context.Context, args []string, stdout io.Writer) error {
	if len(args) == 1 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help") {
		fmt.Fprintln(stdout, "usage: potato version\n\nPrints the engine, table schema and generator versions and the build (Go, OS, commit).")
		return flag.ErrHelp
	}
	if len(args) > 0 {
		return usagef("version", "version: unexpected argument %q", args[0])
	}
	fmt.Fprintf(stdout, "potato %s (tables schema %d, synth generator %d), %s %s/%s", replay.Version,
		tables.SchemaVersion, synth.Version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	if bi, ok := debug.ReadBuildInfo(); ok {
		var rev, dirty string
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				if s.Value == "true" {
					dirty = " (modified)"
				}
			}
		}
		if rev != "" {
			fmt.Fprintf(stdout, ", commit %s%s", rev, dirty)
		}
	}
	fmt.Fprintln(stdout)
	return nil
}
