package hostmem

import (
	"bufio"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// cgroupRoom is what the memory cgroups of this process still allow it, in bytes, and whether any of
// them sets a limit: the least, over its cgroup and that cgroup's ancestors up to the mount, of the
// limit less the memory in use that the kernel cannot reclaim (usage less the inactive file cache, as
// container runtimes count a working set). A container (Kubernetes' resources.limits.memory) or a Slurm
// task's cgroup (--mem) is killed at its limit whatever /proc/meminfo says of the node. root is "/"
// but for tests. Both cgroup versions: v2's memory.max, memory.current and memory.stat's inactive_file;
// v1's memory.limit_in_bytes, memory.usage_in_bytes and memory.stat's total_inactive_file.
func cgroupRoom(root string) (int64, bool) {
	data, err := os.ReadFile(filepath.Join(root, "proc/self/cgroup"))
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(data), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		switch {
		case parts[0] == "0" && parts[1] == "": // v2, the unified hierarchy
			if _, err := os.Stat(filepath.Join(root, "sys/fs/cgroup/cgroup.controllers")); err == nil {
				return walkCgroups(filepath.Join(root, "sys/fs/cgroup"), parts[2], v2Files)
			}
		case hasController(parts[1], "memory"): // v1
			return walkCgroups(filepath.Join(root, "sys/fs/cgroup/memory"), parts[2], v1Files)
		}
	}
	return 0, false
}

// cgroupFiles names a cgroup version's files: the limit, the usage, and memory.stat's key of the
// reclaimable file cache.
type cgroupFiles struct{ limit, usage, inactive string }

var (
	v2Files = cgroupFiles{"memory.max", "memory.current", "inactive_file"}
	v1Files = cgroupFiles{"memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file"}
)

// unlimited is the value from which a v1 limit means none (the kernel writes 2^63 less a page).
const unlimited = 1 << 62

// walkCgroups is cgroupRoom over the cgroup at path under the mount base and its ancestors. Inside a
// container the path /proc/self/cgroup gives may be the host's, not found under the container's mount,
// whose root then is the container's own cgroup: the walk starts there.
func walkCgroups(base, path string, f cgroupFiles) (int64, bool) {
	dir := filepath.Join(base, path)
	if _, err := os.Stat(dir); err != nil {
		dir = base
	}
	room, limited := int64(0), false
	for {
		if limit, ok := readBytes(filepath.Join(dir, f.limit)); ok && limit < unlimited {
			used, _ := readBytes(filepath.Join(dir, f.usage))
			used -= statValue(filepath.Join(dir, "memory.stat"), f.inactive)
			r := max(limit-max(used, 0), 0)
			if !limited || r < room {
				room, limited = r, true
			}
		}
		if dir == base || len(dir) <= len(base) {
			return room, limited
		}
		dir = filepath.Dir(dir)
	}
}

// readBytes reads a file holding one number of bytes ("max", v2's no limit, is not one).
func readBytes(path string) (int64, bool) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
	return n, err == nil && n >= 0
}

// statValue is key's value in a memory.stat file ("inactive_file 12345"), 0 where it is not.
func statValue(path, key string) int64 {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), key+" "); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(rest), 10, 64)
			if err == nil && n > 0 {
				return n
			}
		}
	}
	return 0
}

// hasController says that a v1 line's controller list ("cpu,cpuacct") names c.
func hasController(list, c string) bool {
	for _, s := range strings.Split(list, ",") {
		if s == c {
			return true
		}
	}
	return false
}
