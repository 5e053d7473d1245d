// Package hostmem reads how much host memory the system can still give: the one reading behind the
// wave planner's host budget (replay) and the results' default limit (replay/tables), so the two never
// start from different guesses about the same machine.
package hostmem

import (
	"bufio"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Assumed is what Available reports where the system does not say (no /proc/meminfo: macOS, some
// containers): 8 GiB, a laptop's worth, so that budgets made from it stay modest.
const Assumed = 8 << 30

// Available is what the system can still give this process, in bytes, and whether it was read: the
// least of MemAvailable of /proc/meminfo (the kernel's estimate of what can be allocated without
// swapping) and what the process's memory cgroups still allow (cgroupRoom: a container's or a Slurm
// task's limit, which kills at it whatever the node has free); Assumed where neither could be read.
func Available() (int64, bool) {
	return available("/")
}

// available is Available with the file system rooted at root (tests).
func available(root string) (int64, bool) {
	n, ok := int64(Assumed), false
	if f, err := os.Open(filepath.Join(root, "proc/meminfo")); err == nil {
		if m, read := parse(f); read {
			n, ok = m, true
		}
		f.Close()
	}
	if room, limited := cgroupRoom(root); limited && (!ok || room < n) {
		n, ok = room, true
	}
	return n, ok
}

// parse finds the MemAvailable line ("MemAvailable:   123456 kB") of a meminfo text.
func parse(r io.Reader) (int64, bool) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "MemAvailable:")
		if !ok {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
		if err != nil || kb <= 0 || kb > 1<<43 { // past 8 EiB the shift overflows: not a reading
			return 0, false
		}
		return kb << 10, true
	}
	return 0, false
}
