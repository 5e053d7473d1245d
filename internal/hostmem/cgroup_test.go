package hostmem

import (
	"os"
	"path/filepath"
	"testing"
)

// TestAvailableInCgroups: Available is the least of MemAvailable and what the process's memory cgroups
// allow (limit less usage less the reclaimable file cache), over the cgroup and its ancestors, in both
// cgroup versions, starting from the mount's root where the path of /proc/self/cgroup is not under it
// (inside a container); without a limit, MemAvailable.
func TestAvailableInCgroups(t *testing.T) {
	const gib = 1 << 30
	meminfo := "MemTotal: 134217728 kB\nMemAvailable: 104857600 kB\n" // 100 GiB available
	for _, c := range []struct {
		name  string
		files map[string]string
		want  int64
	}{
		{"no cgroup file", map[string]string{}, 100 * gib},
		{"v2, no limit", map[string]string{
			"proc/self/cgroup":                      "0::/job/task\n",
			"sys/fs/cgroup/cgroup.controllers":      "cpu memory\n",
			"sys/fs/cgroup/job/task/memory.max":     "max\n",
			"sys/fs/cgroup/job/memory.max":          "max\n",
			"sys/fs/cgroup/job/task/memory.stat":    "anon 1\n",
			"sys/fs/cgroup/job/task/memory.current": "1000\n",
		}, 100 * gib},
		{"v2, the task's limit less its working set", map[string]string{
			"proc/self/cgroup":                      "0::/job/task\n",
			"sys/fs/cgroup/cgroup.controllers":      "cpu memory\n",
			"sys/fs/cgroup/job/task/memory.max":     "42949672960\n",                                      // 40 GiB
			"sys/fs/cgroup/job/task/memory.current": "32212254720\n",                                      // 30 GiB used,
			"sys/fs/cgroup/job/task/memory.stat":    "anon 1\ninactive_file 21474836480\nactive_file 5\n", // 20 of them reclaimable
		}, 30 * gib},
		{"v2, a parent's limit is tighter", map[string]string{
			"proc/self/cgroup":                      "0::/job/task\n",
			"sys/fs/cgroup/cgroup.controllers":      "cpu memory\n",
			"sys/fs/cgroup/job/task/memory.max":     "42949672960\n",
			"sys/fs/cgroup/job/task/memory.current": "0\n",
			"sys/fs/cgroup/job/memory.max":          "8589934592\n", // 8 GiB
			"sys/fs/cgroup/job/memory.current":      "1073741824\n",
		}, 7 * gib},
		{"v1, inside a container: the host's path is not under the mount", map[string]string{
			"proc/self/cgroup":                           "5:devices:/\n4:memory:/kubepods/pod1/abc\n0::/\n",
			"sys/fs/cgroup/memory/memory.limit_in_bytes": "17179869184\n", // 16 GiB
			"sys/fs/cgroup/memory/memory.usage_in_bytes": "4294967296\n",
			"sys/fs/cgroup/memory/memory.stat":           "inactive_file 5\ntotal_inactive_file 1073741824\n",
		}, 13 * gib},
		{"v1, unlimited", map[string]string{
			"proc/self/cgroup":                           "4:cpu,memory:/\n",
			"sys/fs/cgroup/memory/memory.limit_in_bytes": "9223372036854771712\n",
			"sys/fs/cgroup/memory/memory.usage_in_bytes": "4294967296\n",
		}, 100 * gib},
		{"over its limit: no room", map[string]string{
			"proc/self/cgroup":                           "4:memory:/\n",
			"sys/fs/cgroup/memory/memory.limit_in_bytes": "1073741824\n",
			"sys/fs/cgroup/memory/memory.usage_in_bytes": "2147483648\n",
		}, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			c.files["proc/meminfo"] = meminfo
			for name, text := range c.files {
				p := filepath.Join(root, name)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if got, ok := available(root); got != c.want || !ok {
				t.Errorf("available = %d, %v; want %d (%.1f GiB)", got, ok, c.want, float64(c.want)/gib)
			}
		})
	}
}
