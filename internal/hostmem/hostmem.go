// Package hostmem reads how much host memory the system can still give: the one reading behind the
// wave planner's host budget (replay) and the results' default limit (replay/tables), so the two never
// start from different guesses about the same machine.
package hostmem

import (
	"bufio"
	"io"
	"os"
	"strconv"
	"strings"
)

// Assumed is what Available reports where the system does not say (no /proc/meminfo: macOS, some
// containers): 8 GiB, a laptop's worth, so that budgets made from it stay modest.
const Assumed = 8 << 30

// Available is MemAvailable of /proc/meminfo in bytes (the kernel's estimate of what can be allocated
// without swapping), and whether it was read; Assumed where it could not be.
func Available() (int64, bool) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return Assumed, false
	}
	defer f.Close()
	if n, ok := parse(f); ok {
		return n, true
	}
	return Assumed, false
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
