package runc

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/sys/mountinfo"
	"github.com/opencontainers/cgroups"
	"golang.org/x/sys/unix"
	"k8s.io/cri-streaming/pkg/streaming/remotecommand"

	"github.com/steadyplane/steadyplane/internal/testci"
	"github.com/steadyplane/steadyplane/pkg/node/runtime"
	"github.com/steadyplane/steadyplane/pkg/node/runtime/crilog"
	"github.com/steadyplane/steadyplane/pkg/node/runtime/process"
	"github.com/steadyplane/steadyplane/pkg/procfs"
)

// The test binary is its own exit hook.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "container-exited" {
		os.Exit(ExitHookMain(os.Args[2:]))
	}
	os.Exit(m.Run())
}

func newTestRuntime(t *testing.T) (*Runtime, string) {
	t.Helper()
	if _, err := Available(); err != nil {
		testci.CannotRun(t, "runc runtime: %v", err)
	}
	dir := t.TempDir()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	r, err := New(Options{Root: filepath.Join(dir, "runc"), ExitHook: []string{self, "container-exited"}, CgroupParent: "/steadyplane-test", LogCheckEvery: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return r, dir
}

func waitDone(t *testing.T, c runtime.Container, within time.Duration) runtime.Exit {
	t.Helper()
	select {
	case <-c.Done():
		return c.Exit()
	case <-time.After(within):
		c.Stop(0)
		t.Fatalf("container still running after %v", within)
	}
	return runtime.Exit{}
}

func logLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return crilog.Lines(b)
}

func TestRuncContainer(t *testing.T) {
	r, dir := newTestRuntime(t)
	ctx := context.Background()
	sb, err := r.CreateSandbox("pod1", filepath.Join(dir, "pod1"), "pod-one", false)
	if err != nil {
		t.Fatal(err)
	}
	defer r.RemoveSandbox(sb)
	secret := filepath.Join(dir, "secret-data")
	if err := os.WriteFile(secret, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	vol := filepath.Join(dir, "vol")
	_ = os.MkdirAll(vol, 0o755)
	_ = os.WriteFile(filepath.Join(vol, "key"), []byte("value"), 0o644)

	cfg := &runtime.ContainerConfig{
		ID: "pod1_c", Dir: filepath.Join(dir, "pod1", "c"), Sandbox: sb, LogPath: filepath.Join(dir, "pod1", "c", "0.log"),
		Argv: []string{"/bin/sh", "-c", `hostname; id -u; cat /vol/key; echo; test -e ` + secret + ` && echo SEES-HOST-FILE; touch /usr/x 2>/dev/null && echo USR-WRITABLE; ls -ld /tmp; touch /tmp/ok && echo tmp-ok; ls /sys/class/net; echo err >&2; exit 3`},
		Env:  []string{"PATH=/usr/bin:/bin"}, User: &runtime.User{UID: 1234, GID: 1234},
		Mounts: []runtime.Mount{{Source: vol, Destination: "/vol", ReadOnly: true}},
	}
	c, err := r.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	exit := waitDone(t, c, 20*time.Second)
	lines := logLines(t, cfg.LogPath)
	got := strings.Join(lines, "\n")
	if exit.StartedAt.IsZero() || exit.FinishedAt.Before(exit.StartedAt) {
		t.Errorf("exit %+v: want a start time before the finish time", exit)
	}
	if exit.ExitCode != 3 {
		t.Errorf("exit %+v, want code 3; log:\n%s", exit, got)
	}
	for _, want := range []string{"pod-one", "1234", "value", "tmp-ok", "lo", "err"} {
		if !containsLine(lines, want) {
			t.Errorf("log lacks %q:\n%s", want, got)
		}
	}
	for _, bad := range []string{"SEES-HOST-FILE", "USR-WRITABLE", "eth0"} {
		if containsLine(lines, bad) {
			t.Errorf("log has %q (isolation broken):\n%s", bad, got)
		}
	}
}

func containsLine(lines []string, s string) bool {
	for _, l := range lines {
		if strings.TrimSpace(l) == s {
			return true
		}
	}
	return false
}

func TestRuncStopAndAdopt(t *testing.T) {
	r, dir := newTestRuntime(t)
	cfg := &runtime.ContainerConfig{
		ID: "pod2_c", Dir: filepath.Join(dir, "pod2", "c"), LogPath: filepath.Join(dir, "pod2", "c", "0.log"), Run: 4,
		Argv: []string{"/bin/sh", "-c", "trap 'echo bye; exit 0' TERM; echo up; while :; do sleep 0.1; done"},
	}
	c, err := r.Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	// A new agent (a new Runtime value) finds the same run, still running.
	r2, err := New(r.opts)
	if err != nil {
		t.Fatal(err)
	}
	adopted, ok := r2.Adopt(cfg)
	if !ok || adopted.ID() != c.ID() {
		t.Fatalf("Adopt: %v %v", adopted, ok)
	}
	select {
	case <-adopted.Done():
		t.Fatal("the adopted run reports an end while it runs")
	case <-time.After(300 * time.Millisecond):
	}
	adopted.Stop(5 * time.Second)
	exit := adopted.Exit()
	if exit.ExitCode != 0 || exit.Run != 4 {
		t.Errorf("stopped with SIGTERM: %+v, want exit 0 of run 4 (the trap)", exit)
	}
	<-c.Done()
	if !containsLine(logLines(t, cfg.LogPath), "bye") {
		t.Errorf("log: %q", logLines(t, cfg.LogPath))
	}
	// Ended while no agent watched: the exit file tells.
	again, ok := r2.Adopt(cfg)
	if !ok || again.Exit().Run != 4 || again.Exit().ExitCode != 0 {
		t.Errorf("Adopt of an ended run: %v %+v", ok, again)
	}

	stubborn := *cfg
	stubborn.Argv = []string{"/bin/sh", "-c", "trap '' TERM; while :; do sleep 0.1; done"}
	stubborn.Run = 5
	c, err = r.Start(context.Background(), &stubborn)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	c.Stop(300 * time.Millisecond)
	// 128+9, as conmon (and containerd) report a kill: the CRI has no signal.
	if e := c.Exit(); e.ExitCode != 137 || time.Since(start) > 5*time.Second {
		mon, _ := os.ReadFile(filepath.Join(cfg.Dir, monitorLogFile))
		runcLog, _ := os.ReadFile(filepath.Join(cfg.Dir, runcLogFile))
		t.Errorf("a container ignoring SIGTERM: %+v after %v; want SIGKILL after the grace period; log %q; monitor log:\n%s\nrunc log:\n%s", e, time.Since(start), logLines(t, cfg.LogPath), mon, runcLog)
	}
}

func TestRuncOOMKilled(t *testing.T) {
	r, dir := newTestRuntime(t)
	cfg := &runtime.ContainerConfig{
		ID: "pod3_c", Dir: filepath.Join(dir, "pod3", "c"), LogPath: filepath.Join(dir, "pod3", "c", "0.log"),
		Argv:      []string{"/usr/bin/python3", "-c", "b = []\nwhile True: b.append(bytearray(1 << 20))"},
		Resources: runtime.Resources{MemoryLimit: 50 << 20},
	}
	c, err := r.Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	exit := waitDone(t, c, 30*time.Second)
	if !exit.OOMKilled || exit.ExitCode != 137 {
		t.Errorf("memory hog over 50Mi: %+v, want OOMKilled with 137", exit)
	}
}

func TestRuncStartError(t *testing.T) {
	r, dir := newTestRuntime(t)
	cfg := &runtime.ContainerConfig{
		ID: "pod4_c", Dir: filepath.Join(dir, "pod4", "c"), LogPath: filepath.Join(dir, "pod4", "c", "0.log"),
		Argv: []string{"/no/such/binary"},
	}
	_, err := r.Start(context.Background(), cfg)
	if err == nil || !strings.Contains(err.Error(), "/no/such/binary") {
		t.Errorf("start of a missing binary: %v; want runc's error naming it", err)
	}
}

// TestRuncStartWhileStopping: a start under way when the agent stops (its
// context ends) either finishes, returning a container the agent then stops
// and records, or is abandoned with nothing left running: neither the shim nor
// the container, and a container that had started has its end recorded for
// the next agent. Each grace abandons the start at a different stage.
func TestRuncStartWhileStopping(t *testing.T) {
	r, dir := newTestRuntime(t)
	defer func(g time.Duration) { stopStartGrace = g }(stopStartGrace)
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	var started, abandoned int
	for i, grace := range []time.Duration{0, 20 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond, 5 * time.Second} {
		stopStartGrace = grace
		marker := fmt.Sprintf("3599.%d", i)
		cfg := &runtime.ContainerConfig{
			ID: fmt.Sprintf("pod5_c%d", i), Dir: filepath.Join(dir, "pod5", fmt.Sprint(i)), LogPath: filepath.Join(dir, "pod5", fmt.Sprint(i), "0.log"), Run: 2,
			Argv: []string{"/bin/sleep", marker},
		}
		running := func() int {
			return len(procfs.Find(func(argv []string) bool { return len(argv) == 2 && argv[0] == "/bin/sleep" && argv[1] == marker }))
		}
		c, err := r.Start(ended, cfg)
		if err == nil {
			started++
			// runc start returns once the container's init was told to
			// exec; under load the exec into the command can lag behind.
			n := running()
			for deadline := time.Now().Add(5 * time.Second); n != 1 && time.Now().Before(deadline); n = running() {
				time.Sleep(20 * time.Millisecond)
			}
			if n != 1 {
				t.Errorf("grace %v: Start returned a container, but %d of its processes run", grace, n)
			}
			c.Stop(0)
			continue
		}
		abandoned++
		if !strings.Contains(err.Error(), "context canceled before the container started") {
			t.Errorf("grace %v: %v; want the start abandoned as the context ended", grace, err)
		}
		if n := running(); n != 0 {
			t.Errorf("grace %v: start abandoned, but %d of its processes run", grace, n)
		}
		if pid, alive := process.ReadPidFile(filepath.Join(cfg.Dir, monitorPidFile)); alive {
			t.Errorf("grace %v: start abandoned, but its shim (pid %d) runs", grace, pid)
		}
		if out, err := r.runc("state", cfg.ID).CombinedOutput(); err == nil {
			t.Errorf("grace %v: start abandoned, but runc still knows the container: %s", grace, out)
		}
		_, err = readRun(cfg.Dir)
		t.Logf("grace %v: abandoned after the container had started: %v", grace, err == nil)
		if err == nil {
			// It had started: the next agent finds its end, not a run to adopt.
			if c, ok := r.Adopt(cfg); !ok || c.Exit().Run != 2 || c.Exit().ExitCode != 137 || !strings.Contains(c.Exit().Message, "context canceled") {
				t.Errorf("grace %v: adopting an abandoned run: %v %+v; want its recorded end (137)", grace, ok, c)
			}
		}
	}
	// The narrowest stage, between the shim's record of the run and its
	// answer, directly: what the container ran is ended and recorded.
	cfg := &runtime.ContainerConfig{ID: "pod5_late", Dir: filepath.Join(dir, "pod5", "late"), LogPath: filepath.Join(dir, "pod5", "late", "0.log"), Run: 3,
		Argv: []string{"/bin/sleep", "3599.9"}}
	if _, err := r.Start(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	shim, alive := process.ReadPidFile(filepath.Join(cfg.Dir, monitorPidFile))
	if !alive {
		t.Fatal("no shim runs the container")
	}
	shimEnded := make(chan struct{})
	go func() { waitForExit(shim); close(shimEnded) }()
	r.abortStart(shim, shimEnded, cfg, context.Canceled)
	if n := len(procfs.Find(func(argv []string) bool { return len(argv) == 2 && argv[1] == "3599.9" })); n != 0 {
		t.Errorf("a started container whose start was abandoned: %d processes left", n)
	}
	if out, err := r.runc("state", cfg.ID).CombinedOutput(); err == nil {
		t.Errorf("runc still knows an abandoned container: %s", out)
	}
	if c, ok := r.Adopt(cfg); !ok || c.Exit().Run != 3 || c.Exit().ExitCode != 137 || !strings.Contains(c.Exit().Message, "context canceled") {
		t.Errorf("adopting a started run whose start was abandoned: %v %+v; want its recorded end (137, why)", ok, c.Exit())
	}
	if started == 0 || abandoned == 0 {
		t.Errorf("%d starts finished, %d abandoned; want both (the 5s grace finishes, 0 abandons)", started, abandoned)
	}
}

// imageLayers makes two layer directories of a busybox image in overlayfs's
// form: a base with busybox, /etc/motd and /etc/passwd, and a layer above
// that deletes /etc/motd (a whiteout) and adds /etc/issue. Top first.
func imageLayers(t *testing.T, dir string) []string {
	t.Helper()
	const busybox = "/bin/busybox"
	if _, err := os.Stat(busybox); err != nil {
		testci.CannotRun(t, "test images are made of Debian's busybox-static: %v", err)
	}
	base, top := filepath.Join(dir, "layer-base"), filepath.Join(dir, "layer-top")
	for _, d := range []string{base + "/bin", base + "/etc", top + "/etc"} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(busybox)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(base+"/bin/busybox", b, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, applet := range []string{"sh", "cat", "ls", "id", "sleep", "touch", "grep", "stty", "seq"} {
		if err := os.Symlink("busybox", base+"/bin/"+applet); err != nil {
			t.Fatal(err)
		}
	}
	for p, content := range map[string]string{base + "/etc/motd": "base motd\n", base + "/etc/passwd": "root:x:0:0::/root:/bin/sh\n", top + "/etc/issue": "from the top layer\n"} {
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.Mknod(top+"/etc/motd", unix.S_IFCHR, 0); err != nil {
		t.Fatal(err)
	}
	return []string{top, base}
}

// TestRuncImageRootfs: a container whose root is its image's layers sees
// the image (a whiteout hides what a lower layer had) and nothing of the
// host; what it writes goes to its own writable layer, fresh for each run;
// the root filesystem is unmounted when the run ends.
func TestRuncImageRootfs(t *testing.T) {
	r, dir := newTestRuntime(t)
	sb, err := r.CreateSandbox("pod-img", filepath.Join(dir, "pod-img"), "pod-img", false)
	if err != nil {
		t.Fatal(err)
	}
	defer r.RemoveSandbox(sb)
	layers := imageLayers(t, dir)
	cdir := filepath.Join(dir, "pod-img", "c")
	start := func(run int32, script string) (runtime.Exit, []string) {
		t.Helper()
		cfg := &runtime.ContainerConfig{ID: "pod-img_c", Dir: cdir, Run: run, Sandbox: sb, Rootfs: &runtime.Rootfs{Layers: layers},
			Argv: []string{"/bin/sh", "-c", script}, Env: []string{"PATH=/bin"}, LogPath: filepath.Join(cdir, fmt.Sprintf("%d.log", run))}
		c, err := r.Start(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		return waitDone(t, c, 30*time.Second), logLines(t, cfg.LogPath)
	}
	exit, lines := start(0, `cat /etc/issue; cat /etc/motd 2>/dev/null || echo no motd; ls /etc/shadow /usr 2>/dev/null || echo no host files; cat /written 2>/dev/null || echo nothing written; echo mine > /written`)
	want := []string{"from the top layer", "no motd", "no host files", "nothing written"}
	if exit.ExitCode != 0 || strings.Join(lines, "|") != strings.Join(want, "|") {
		t.Fatalf("first run: exit %d, output %q; want %q", exit.ExitCode, lines, want)
	}
	if _, err := os.Stat(filepath.Join(layers[0], "written")); err == nil {
		t.Error("the container wrote into an image layer")
	}
	rootfs := filepath.Join(cdir, bundleDir, "rootfs")
	deadline := time.Now().Add(10 * time.Second)
	for mounted, _ := mountinfo.Mounted(rootfs); mounted && time.Now().Before(deadline); mounted, _ = mountinfo.Mounted(rootfs) {
		time.Sleep(50 * time.Millisecond)
	}
	if mounted, _ := mountinfo.Mounted(rootfs); mounted {
		t.Error("the root filesystem is still mounted after the run ended")
	}
	_, lines = start(1, `cat /written 2>/dev/null || echo nothing written`)
	if strings.Join(lines, "|") != "nothing written" {
		t.Errorf("second run saw %q: the writable layer was not fresh", lines)
	}
}

// TestRuncSeccompAndSysctls: RuntimeDefault puts the container under a
// seccomp filter (mode 2 in /proc/self/status), a privileged container runs
// without one, and a pod's sysctl is set in its own network namespace.
func TestRuncSeccompAndSysctls(t *testing.T) {
	r, dir := newTestRuntime(t)
	layers := imageLayers(t, dir)
	// A node-critical container's -997, or as low as this machine lets the
	// agent go (a sandbox may withhold CAP_SYS_RESOURCE).
	current, canLower := agentOOMScoreAdj()
	oomAdj := strconv.Itoa(clampOOMScoreAdj(-997, current, canLower))
	for i, tc := range []struct {
		name       string
		privileged bool
		netns      bool
		want       string
	}{
		{"RuntimeDefault", false, true, "Seccomp:\t2|1|" + oomAdj},
		{"privileged", true, true, "Seccomp:\t0|1|" + oomAdj},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := fmt.Sprintf("seccomp-%d", i)
			sb, err := r.CreateSandbox(id, filepath.Join(dir, id), id, false)
			if err != nil {
				t.Fatal(err)
			}
			defer r.RemoveSandbox(sb)
			cdir := filepath.Join(dir, id, "c")
			cfg := &runtime.ContainerConfig{ID: id + "_c", Dir: cdir, Sandbox: sb, Rootfs: &runtime.Rootfs{Layers: layers},
				Argv: []string{"/bin/sh", "-c", "grep ^Seccomp: /proc/self/status; cat /proc/sys/net/ipv4/tcp_syncookies /proc/self/oom_score_adj"}, Env: []string{"PATH=/bin"}, OOMScoreAdj: -997,
				LogPath: filepath.Join(cdir, "0.log"), Seccomp: &runtime.Seccomp{RuntimeDefault: true}, Privileged: tc.privileged,
				Sysctls: map[string]string{"net.ipv4.tcp_syncookies": "1"}}
			c, err := r.Start(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			exit := waitDone(t, c, 30*time.Second)
			if got := strings.Join(logLines(t, cfg.LogPath), "|"); exit.ExitCode != 0 || got != tc.want {
				t.Errorf("exit %d, output %q; want %q", exit.ExitCode, got, tc.want)
			}
		})
	}
}

// TestRuncLogRotation: a container writing as fast as it can keeps its
// logs within the rotation's files, each near the size; one writing
// steadily has its log rotated with no line lost at a rotation.
func TestRuncLogRotation(t *testing.T) {
	r, dir := newTestRuntime(t)
	r.opts.LogMaxSize, r.opts.LogMaxFiles = 64<<10, 3
	r.logs = newLogRotator(r.opts.LogMaxSize, r.opts.LogMaxFiles, time.Second)
	layers := imageLayers(t, dir)
	sb, err := r.CreateSandbox("logs", filepath.Join(dir, "logs"), "logs", false)
	if err != nil {
		t.Fatal(err)
	}
	defer r.RemoveSandbox(sb)
	run := func(name, script string) (logPath string, files int, total int64, lines []string) {
		cdir := filepath.Join(dir, "logs", name)
		cfg := &runtime.ContainerConfig{ID: "logs_" + name, Dir: cdir, Sandbox: sb, Rootfs: &runtime.Rootfs{Layers: layers},
			Argv: []string{"/bin/sh", "-c", script}, Env: []string{"PATH=/bin"}, LogPath: filepath.Join(cdir, "0.log")}
		c, err := r.Start(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		if exit := waitDone(t, c, 60*time.Second); exit.ExitCode != 0 {
			t.Fatalf("%s: exit %d", name, exit.ExitCode)
		}
		rotated, _ := crilog.Rotated(cfg.LogPath)
		for _, p := range append(rotated, cfg.LogPath) {
			if st, err := os.Stat(p); err == nil {
				files++
				total += st.Size()
				b, _ := os.ReadFile(p)
				lines = append(lines, crilog.Lines(b)...)
			}
		}
		return cfg.LogPath, files, total, lines
	}

	// The flood with files of 512 KiB: what conmon writes between a
	// rename and its reopen (up to ~100 KiB under the race detector) is
	// small beside them, as beside the kubelet's 10 MiB.
	r.logs = newLogRotator(512<<10, 3, time.Second)
	// In bursts of about 200 KiB, 50 ms apart: one burst of 4 MiB can be
	// written whole before a busy machine (CI runs packages side by side)
	// schedules the rotator once, which measures the machine, not the
	// rotation.
	_, files, total, lines := run("flood", `for i in $(seq 0 19); do seq $((i*30000+1)) $((i*30000+30000)); sleep 0.05; done`)
	// Rotated on writes: the files may pass the size by what is written
	// while a rotation is under way, not by much.
	if limit := int64(3 * 2 * 512 << 10); files > 3 || total > limit {
		t.Errorf("flood: %d log files, %d bytes; want at most 3 files within %d bytes (about 4 MiB was written)", files, total, limit)
	}
	// The last line is in the current file, or in the newest rotated one
	// when a rotation came after it.
	if len(lines) == 0 || lines[len(lines)-1] != "600000" {
		t.Errorf("flood: the logs do not end with the last line written")
	}
	r.logs = newLogRotator(r.opts.LogMaxSize, r.opts.LogMaxFiles, time.Second)

	// About 200 KiB, rotated three times or more: no line is lost.
	_, files, _, lines = run("steady", "i=0; while [ $i -lt 2000 ]; do echo line $i of a container that writes steadily, some ninety bytes a line....; i=$((i+1)); [ $((i % 10)) = 0 ] && sleep 0.01; done; true")
	if files != 3 {
		t.Errorf("steady: %d log files; want 3 (rotated twice or more, the oldest pruned)", files)
	}
	if len(lines) == 0 {
		t.Fatal("steady: no log lines")
	}
	var first int
	if _, err := fmt.Sscanf(lines[0], "line %d", &first); err != nil {
		t.Fatalf("steady: first line %q", lines[0])
	}
	for i, l := range lines {
		if want := fmt.Sprintf("line %d of", first+i); !strings.HasPrefix(l, want) {
			t.Fatalf("steady: line %d of the kept logs is %q; want %q…: a line was lost at a rotation", i, l, want)
		}
	}
	if first+len(lines) != 2000 {
		t.Errorf("steady: the kept logs end at line %d; want 1999", first+len(lines)-1)
	}
}

// syncBuffer is a bytes.Buffer for one writer and a polling reader.
type syncBuffer struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// waitFor polls until b holds want, or fails after within.
func (b *syncBuffer) waitFor(t *testing.T, want string, within time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if strings.Contains(b.String(), want) {
			return
		}
	}
	t.Fatalf("output %q does not hold %q after %v", b.String(), want, within)
}

// TestRuncAttach: kubectl attach -i and kubectl run -it through conmon's
// attach socket. A container with stdin reads what the client sends and
// its stdin ends with the first attach (stdinOnce); one with a terminal
// gets a shell whose terminal follows the client's size, and its output
// is also in its log. A run without stdin refuses stdin.
func TestRuncAttach(t *testing.T) {
	r, dir := newTestRuntime(t)
	layers := imageLayers(t, dir)
	sb, err := r.CreateSandbox("attach", filepath.Join(dir, "attach"), "attach", false)
	if err != nil {
		t.Fatal(err)
	}
	defer r.RemoveSandbox(sb)
	start := func(name string, cfg runtime.ContainerConfig) runtime.Container {
		cdir := filepath.Join(dir, "attach", name)
		cfg.ID, cfg.Dir, cfg.Sandbox, cfg.LogPath = "attach_"+name, cdir, sb, filepath.Join(cdir, "0.log")
		cfg.Rootfs, cfg.Env = &runtime.Rootfs{Layers: layers}, []string{"PATH=/bin"}
		c, err := r.Start(context.Background(), &cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Stop(0) })
		return c
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// -i, stdinOnce: the input's end is the container's.
	c := start("stdin", runtime.ContainerConfig{Stdin: true, StdinOnce: true,
		Argv: []string{"/bin/sh", "-c", "while read line; do echo got $line; echo err $line >&2; done; echo stdin ended"}})
	var out, errOut syncBuffer
	if err := c.(runtime.Attachable).Attach(ctx, strings.NewReader("one\ntwo\n"), &out, &errOut, nil); err != nil {
		t.Fatal(err)
	}
	if exit := waitDone(t, c, 10*time.Second); exit.ExitCode != 0 {
		t.Errorf("stdin: exit %d", exit.ExitCode)
	}
	if got := out.String(); got != "got one\ngot two\nstdin ended\n" {
		t.Errorf("stdin: stdout %q", got)
	}
	if got := errOut.String(); got != "err one\nerr two\n" {
		t.Errorf("stdin: stderr %q", got)
	}

	// -it: a shell on a terminal, resized by the client.
	c = start("tty", runtime.ContainerConfig{Stdin: true, StdinOnce: true, TTY: true, Argv: []string{"/bin/sh"}})
	inR, inW := io.Pipe()
	defer inW.Close()
	var term syncBuffer
	sizes := make(chan remotecommand.TerminalSize, 2)
	attached := make(chan error, 1)
	go func() { attached <- c.(runtime.Attachable).Attach(ctx, inR, &term, nil, sizes) }()
	// As kubectl: its size plus one, then its size.
	sizes <- remotecommand.TerminalSize{Width: 101, Height: 31}
	sizes <- remotecommand.TerminalSize{Width: 100, Height: 30}
	// The resize goes through conmon's control FIFO, the input through the
	// socket: ask for the size until the new one shows.
	for i := 0; i < 50 && !strings.Contains(term.String(), "30 100"); i++ {
		fmt.Fprintf(inW, "stty size; echo TERM=$TERM\n")
		time.Sleep(100 * time.Millisecond)
	}
	term.waitFor(t, "30 100", 5*time.Second)
	term.waitFor(t, "TERM=xterm", 5*time.Second)
	fmt.Fprintf(inW, "echo hi-$((40+2)); exit 3\n")
	if exit := waitDone(t, c, 10*time.Second); exit.ExitCode != 3 {
		t.Errorf("tty: exit %d, want the shell's 3", exit.ExitCode)
	}
	term.waitFor(t, "hi-42", time.Second)
	select {
	case err := <-attached:
		if err != nil {
			t.Errorf("tty: attach: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Error("tty: the attach did not end with the run")
	}
	if lines := logLines(t, filepath.Join(dir, "attach", "tty", "0.log")); !slices.ContainsFunc(lines, func(l string) bool { return strings.Contains(l, "hi-42") }) {
		t.Errorf("tty: the log does not hold the terminal's output: %q", lines)
	}

	// No stdin in the spec: refused.
	c = start("nostdin", runtime.ContainerConfig{Argv: []string{"/bin/sleep", "60"}})
	if err := c.(runtime.Attachable).Attach(ctx, strings.NewReader("x\n"), &out, nil, nil); err == nil || !strings.Contains(err.Error(), "no stdin") {
		t.Errorf("stdin to a container without: %v", err)
	}
}

// TestRuncQuickExit: a command that ends at once (its exit hook may run
// before the agent has recorded the start) ends with its code, its run and
// a start time, and runc forgets it.
func TestRuncQuickExit(t *testing.T) {
	r, dir := newTestRuntime(t)
	for i := 0; i < 5; i++ {
		cdir := filepath.Join(dir, "quick", fmt.Sprint(i))
		cfg := &runtime.ContainerConfig{ID: fmt.Sprintf("quick_%d", i), Dir: cdir, LogPath: filepath.Join(cdir, "0.log"), Run: int32(i),
			Argv: []string{"/bin/sh", "-c", "exit 7"}}
		c, err := r.Start(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		exit := waitDone(t, c, 20*time.Second)
		if exit.ExitCode != 7 || exit.Run != int32(i) || exit.StartedAt.IsZero() || exit.FinishedAt.Before(exit.StartedAt) {
			t.Errorf("run %d: %+v; want exit 7 of run %d with a start before the finish", i, exit, i)
		}
		if out, err := r.runc("state", cfg.ID).CombinedOutput(); err == nil {
			t.Errorf("run %d: runc still knows the ended container: %s", i, out)
		}
	}
}

// TestRuncResize changes a running container's limits and CPU share as an
// in-place pod resize does, and lifts limits that are gone.
func TestRuncResize(t *testing.T) {
	r, dir := newTestRuntime(t)
	cfg := &runtime.ContainerConfig{
		ID: "pod6_r", Dir: filepath.Join(dir, "pod6", "r"), LogPath: filepath.Join(dir, "pod6", "r", "0.log"),
		Argv:      []string{"/bin/sleep", "3599"},
		Resources: runtime.Resources{MemoryLimit: 64 << 20, CPUMillis: 200, CPURequestMillis: 100},
	}
	c, err := r.Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop(0)
	_, err = os.Stat(filepath.Join(cgroupRoot, "cgroup.controllers"))
	v2 := err == nil
	cgroup := func(subsystem, file string) string {
		path := filepath.Join(cgroupRoot, subsystem, r.cgroupsPath(cfg.ID), file)
		if v2 {
			path = filepath.Join(cgroupRoot, r.cgroupsPath(cfg.ID), file)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	// check takes v1's values; on v2 the same settings read differently.
	check := func(when string, memory, quota, shares string) {
		t.Helper()
		files := [3]string{"memory.limit_in_bytes", "cpu.cfs_quota_us", "cpu.shares"}
		if v2 {
			files = [3]string{"memory.max", "cpu.max", "cpu.weight"}
			if memory == "9223372036854771712" {
				memory = "max"
			}
			if quota == "-1" {
				quota = "max"
			}
			quota += " 100000"
			n, _ := strconv.ParseUint(shares, 10, 64)
			shares = strconv.FormatUint(cgroups.ConvertCPUSharesToCgroupV2Value(n), 10)
		}
		for i, want := range []string{memory, quota, shares} {
			subsystem := [3]string{"memory", "cpu", "cpu"}[i]
			if got := cgroup(subsystem, files[i]); got != want {
				t.Errorf("%s: %s is %s, want %s", when, files[i], got, want)
			}
			// The container reads the same at /sys/fs/cgroup.
			inside := filepath.Join(cgroupRoot, subsystem, files[i])
			if v2 {
				inside = filepath.Join(cgroupRoot, files[i])
			}
			out, err := c.Command([]string{"/bin/cat", inside}, nil, "", false).CombinedOutput()
			if got := strings.TrimSpace(string(out)); err != nil || got != want {
				t.Errorf("%s: the container reads %s as %q (%v), want %s", when, inside, got, err, want)
			}
		}
	}
	check("at start", "67108864", "20000", "102")
	if err := c.(runtime.Resizable).Resize(context.Background(), runtime.Resources{MemoryLimit: 96 << 20, CPUMillis: 300, CPURequestMillis: 250}); err != nil {
		t.Fatal(err)
	}
	check("after a resize up", "100663296", "30000", "256")
	if err := c.(runtime.Resizable).Resize(context.Background(), runtime.Resources{CPURequestMillis: 250}); err != nil {
		t.Fatal(err)
	}
	check("limits removed", "9223372036854771712", "-1", "256")
	select {
	case <-c.Done():
		t.Fatalf("the container ended on a resize: %+v", c.Exit())
	default:
	}
}
