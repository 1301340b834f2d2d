package runc

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/steadyplane/steadyplane/pkg/node/runtime"
)

// TestCgroupUsage reads a container's usage from cgroup files as v1 and v2
// lay them out (a directory of files standing in for /sys/fs/cgroup).
func TestCgroupUsage(t *testing.T) {
	write := func(root string, files map[string]string) {
		t.Helper()
		for name, body := range files {
			p := filepath.Join(root, name)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	const path = "steadyplane/uid_c"
	v2 := t.TempDir()
	write(v2, map[string]string{
		path + "/memory.current": "1000\n", path + "/memory.stat": "anon 600\ninactive_file 300\n",
		path + "/pids.current": "3\n", path + "/cpu.stat": "usage_usec 2500\nuser_usec 2000\n",
	})
	v1 := t.TempDir()
	write(v1, map[string]string{
		"memory/" + path + "/memory.usage_in_bytes": "1000\n", "memory/" + path + "/memory.stat": "total_inactive_file 300\n",
		"pids/" + path + "/pids.current": "3\n", "cpuacct/" + path + "/cpuacct.usage": "2500000\n",
	})
	want := runtime.Usage{MemoryWorkingSet: 700, Processes: 3, CPUUsageNanoseconds: 2_500_000}
	for name, root := range map[string]string{"v2": v2, "v1": v1} {
		if got, ok := cgroupUsage(root, path); !ok || got != want {
			t.Errorf("%s: %+v %v; want %+v", name, got, ok, want)
		}
	}
	if _, ok := cgroupUsage(t.TempDir(), path); ok {
		t.Error("a cgroup that is not there was read")
	}
}
