package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/steadyplane/steadyplane/internal/testenv"
	"github.com/steadyplane/steadyplane/internal/testimage"
	"github.com/steadyplane/steadyplane/internal/testup"
	"github.com/steadyplane/steadyplane/pkg/buildinfo"
	"github.com/steadyplane/steadyplane/pkg/fallback/release"
	"github.com/steadyplane/steadyplane/pkg/procfs"
)

// TestReleaseShownEverywhere builds the checkout as release v0.9.1, as a
// release build is made (-ldflags -X), and finds that release where a user
// looks for it: steadyplane version, the Node's version (kubectl get nodes),
// the API server's /version and every process's steadyplane_build_info.
// A build given a release that is no version refuses to run.
func TestReleaseShownEverywhere(t *testing.T) {
	_, dataDir, ports, ctx := testup.Setup(t, 10*time.Minute)
	const release = "v0.9.1"
	bin, err := testenv.BinaryOfRelease(release)
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(ctx, bin, "version", "-o", "json").Output()
	if err != nil {
		t.Fatalf("steadyplane version: %v", err)
	}
	var info buildinfo.Info
	if err := json.Unmarshal(out, &info); err != nil {
		t.Fatalf("steadyplane version -o json: %v\n%s", err, out)
	}
	if info.Release != release || !strings.HasPrefix(info.Kubernetes, "v1.") || info.GitVersion != info.Kubernetes+"+steadyplane-"+release {
		t.Fatalf("steadyplane version -o json = %+v, want release %s in gitVersion", info, release)
	}
	if text, err := exec.CommandContext(ctx, bin, "version").Output(); err != nil || !strings.Contains(string(text), "Release:     "+release) {
		t.Errorf("steadyplane version: %v\n%s", err, text)
	}

	bad, err := testenv.BinaryOfRelease("0.9")
	if err != nil {
		t.Fatal(err)
	}
	if b, err := exec.CommandContext(ctx, bad, "up", "--data-dir", t.TempDir()).CombinedOutput(); err == nil || !strings.Contains(string(b), `release "0.9" is not a version like v0.5.0`) {
		t.Errorf("a build with release 0.9 ran up: %v\n%s", err, b)
	}

	up := testup.Start(t, bin, dataDir, ports)
	up.WaitUp(t, 4*time.Minute)
	kubeconfig := dataDir + "/admin.kubeconfig"
	var nodeVersion string
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(time.Second) {
		nodeVersion, _ = testup.Kubectl(t, ctx, kubeconfig, "get", "nodes", "-o", "jsonpath={.items[*].status.nodeInfo.kubeletVersion}")
		if nodeVersion != "" {
			break
		}
	}
	if nodeVersion != info.GitVersion {
		t.Errorf("the Node's kubelet version is %q, want %q", nodeVersion, info.GitVersion)
	}
	if table, err := testup.Kubectl(t, ctx, kubeconfig, "get", "nodes"); err != nil || !strings.Contains(table, info.GitVersion) {
		t.Errorf("kubectl get nodes does not show %s: %v\n%s", info.GitVersion, err, table)
	}
	if v, err := testup.Kubectl(t, ctx, kubeconfig, "get", "--raw", "/version"); err != nil || !strings.Contains(v, `"gitVersion": "`+info.GitVersion+`"`) {
		t.Errorf("/version: %v\n%s", err, v)
	}
	wantMetric := `release="` + release + `"`
	if m, err := testup.Kubectl(t, ctx, kubeconfig, "get", "--raw", "/metrics"); err != nil || !hasBuildInfo(m, wantMetric) {
		t.Errorf("the API server's metrics lack steadyplane_build_info{%s}: %v", wantMetric, err)
	}
	for _, name := range []string{"node-metrics-port", "operator-metrics-port"} {
		m, err := getLoopback(ctx, "http://127.0.0.1:"+up.Flag(name)+"/metrics")
		if err != nil || !hasBuildInfo(m, wantMetric) {
			t.Errorf("metrics on --%s lack steadyplane_build_info{%s}: %v", name, wantMetric, err)
		}
	}
	up.Stop(t)
}

func hasBuildInfo(metrics, label string) bool {
	for _, line := range strings.Split(metrics, "\n") {
		if strings.HasPrefix(line, "steadyplane_build_info{") && strings.Contains(line, label) && strings.HasSuffix(line, " 1") {
			return true
		}
	}
	return false
}

// getLoopback reads url, which names 127.0.0.1.
func getLoopback(ctx context.Context, url string) (string, error) {
	if !testenv.IsLoopbackURL(url) {
		return "", fmt.Errorf("%s is not on loopback: tests dial nothing else", url)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// kubectlThroughRestarts is kubectl on kubeconfig, failing the test on an
// error; a refused connection is waited out for 90s: a lone server has
// nothing to fail over to while its API server restarts.
func kubectlThroughRestarts(t *testing.T, ctx context.Context, kubeconfig string) func(args ...string) string {
	return func(args ...string) string {
		t.Helper()
		for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(500 * time.Millisecond) {
			out, err := testup.Kubectl(t, ctx, kubeconfig, args...)
			if err == nil {
				return strings.TrimSpace(out)
			}
			if !strings.Contains(out, "refused") || time.Now().After(deadline) {
				t.Fatalf("kubectl %v: %v\n%s", args, err, out)
			}
		}
	}
}

// keptPod is a busybox pod that must go through a restart or an upgrade
// untouched: its container, restarts, readiness and host process.
type keptPod struct {
	t       *testing.T
	kubectl func(args ...string) string
	sleep   string // its argument to sleep, which finds its process
	before  string // its state when it started
	pid     int
}

// keptPodState is what must not change, as jsonpath.
const keptPodState = `jsonpath={.status.containerStatuses[0].containerID} {.status.containerStatuses[0].restartCount} {.status.conditions[?(@.type=="Ready")].status} {.status.conditions[?(@.type=="Ready")].lastTransitionTime}`

// startKeptPod runs pod sleeper (sleep seconds, an argument no other
// test's pod has) and waits until it is Ready.
func startKeptPod(t *testing.T, kubectl func(args ...string) string, seconds string) *keptPod {
	t.Helper()
	kubectl("run", "sleeper", "--image="+testimage.BusyboxName, "--", "sleep", seconds)
	kubectl("wait", "--for=condition=Ready", "pod/sleeper", "--timeout=120s")
	p := &keptPod{t: t, kubectl: kubectl, sleep: seconds, before: kubectl("get", "pod", "sleeper", "-o", keptPodState)}
	pids := p.processes()
	if len(pids) != 1 {
		t.Fatalf("want one process of the pod, found %v", pids)
	}
	p.pid = pids[0]
	return p
}

func (p *keptPod) processes() []int {
	return procfs.Find(func(argv []string) bool { return len(argv) == 2 && argv[0] == "sleep" && argv[1] == p.sleep })
}

// processRuns checks that the pod's process still runs (the API may be
// down).
func (p *keptPod) processRuns(step string) {
	p.t.Helper()
	if got := p.processes(); len(got) != 1 || got[0] != p.pid {
		p.t.Errorf("%s: the pod's process %d is gone (now %v)", step, p.pid, got)
	}
}

// unchanged checks, within a minute, that the API shows the pod as it
// was, and that its process runs.
func (p *keptPod) unchanged(step string) {
	p.t.Helper()
	var after string
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		if after = p.kubectl("get", "pod", "sleeper", "-o", keptPodState); after == p.before {
			break
		}
	}
	if after != p.before {
		p.t.Errorf("%s: the pod changed (container ID, restarts, Ready, since):\n before %s\n after  %s", step, p.before, after)
	}
	p.processRuns(step)
}

// events are the reasons of the pod's Events.
func (p *keptPod) events() string {
	return p.kubectl("get", "events", "--field-selector", "involvedObject.name=sleeper", "-o", "jsonpath={.items[*].reason}")
}

// nodeRelease waits up to two minutes for the Node to show release.
func nodeRelease(t *testing.T, kubectl func(args ...string) string, release string) {
	t.Helper()
	var version string
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline) && !strings.HasSuffix(version, "+steadyplane-"+release); time.Sleep(500 * time.Millisecond) {
		version = kubectl("get", "node", "-o", "jsonpath={.items[0].status.nodeInfo.kubeletVersion}")
	}
	if !strings.HasSuffix(version, "+steadyplane-"+release) {
		t.Errorf("the Node's version is %q, want release %s", version, release)
	}
}

// TestHandRestartWithNextReleaseKeepsPods is the k3s way of upgrading,
// by hand: up of release v0.9.1 runs with --stop-pods-on-exit=false and
// a pod; SIGTERM stops its control plane and leaves the pod's container
// running; up of v0.9.2 on the same data directory adopts it: the same
// container and process, no restart, and the pod never stopped being
// Ready. The Node then shows the new release, and the API server moves to
// it as a revision.
func TestHandRestartWithNextReleaseKeepsPods(t *testing.T) {
	testimage.RequireBusybox(t)
	_, dataDir, ports, ctx := testup.Setup(t, 12*time.Minute)
	current, err := testenv.BinaryOfRelease("v0.9.1")
	if err != nil {
		t.Fatal(err)
	}
	next, err := testenv.BinaryOfRelease("v0.9.2")
	if err != nil {
		t.Fatal(err)
	}
	if err := testimage.BusyboxArchive(filepath.Join(dataDir, "images", "busybox.tar")); err != nil {
		t.Fatal(err)
	}
	kubectl := kubectlThroughRestarts(t, ctx, filepath.Join(dataDir, "admin.kubeconfig"))

	first := testup.Start(t, current, dataDir, ports, "--stop-pods-on-exit=false")
	first.WaitUp(t, 4*time.Minute)
	pod := startKeptPod(t, kubectl, "7207")

	first.Stop(t)
	stopped := time.Now()
	pod.processRuns("after up stopped with --stop-pods-on-exit=false")
	binDir := filepath.Join(dataDir, "bin") + "/"
	if left := procfs.Find(func(argv []string) bool { return len(argv) > 0 && strings.HasPrefix(argv[0], binDir) }); len(left) > 0 {
		t.Errorf("control-plane processes still run after up stopped: %v", left)
	}

	second := testup.Start(t, next, dataDir, ports)
	second.WaitUp(t, 4*time.Minute)
	t.Logf("up of the next release was up %v after the first stopped", time.Since(stopped).Round(100*time.Millisecond))
	nodeRelease(t, kubectl, "v0.9.2")
	pod.unchanged("after up of v0.9.2")
	revisions := `jsonpath={.status.latestAvailableRevision} {.status.conditions[?(@.type=="Progressing")].status}`
	var rollout string
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline) && !strings.HasSuffix(rollout, " False"); time.Sleep(time.Second) {
		rollout = kubectl("get", "kubeapiserver", "cluster", "-o", revisions)
	}
	t.Logf("the API server's latest revision and Progressing after the restart: %s", rollout)
	pod.unchanged("after the API server moved to the new binary")
	if reasons := pod.events(); !strings.Contains(reasons, "Adopted") || strings.Contains(reasons, "Killing") {
		t.Errorf("the pod's events: %s; want Adopted and no Killing", reasons)
	}
	second.Stop(t)
	if got := pod.processes(); len(got) != 0 {
		t.Errorf("the pod's process still runs after up stopped (it stops pods by default): %v", got)
	}
}

// TestUpgradeCommand runs the README's "Upgrading steadyplane" verbatim on
// a server of release v0.9.1 with a pod (up stops pods on exit, the
// default: the hand-over leaves them all the same): to v0.9.2 and back
// with --rollback. Then to a broken v0.9.3 whose up exits at start, after
// which up, started again as a service manager would with the binary it
// was first given, runs v0.9.1 and records the failure. Then v0.9.2 from
// the admin kubeconfig alone (upgrade --kubeconfig: the binary handed in
// through the node proxy, the operator rolling it), and a rollback whose
// scheduler crash-loops while the move settles: up goes back to v0.9.2 by
// itself. The pod's
// container, process, restarts and readiness never change, and what
// upgrade refuses changes nothing.
func TestUpgradeCommand(t *testing.T) {
	testimage.RequireBusybox(t)
	block := testup.ReadmeBlock(t, "Upgrading steadyplane")
	_, sp, ports, ctx := testup.Setup(t, 20*time.Minute)
	work := filepath.Dir(sp)
	dataDir := filepath.Join(work, ".steadyplane")
	v1, err := testenv.BinaryOfRelease("v0.9.1")
	if err != nil {
		t.Fatal(err)
	}
	v2, err := testenv.BinaryOfRelease("v0.9.2")
	if err != nil {
		t.Fatal(err)
	}
	info, err := release.DescribeBinary(ctx, v2)
	if err != nil {
		t.Fatal(err)
	}
	broken, err := testenv.BrokenRelease("v0.9.3", info.Kubernetes)
	if err != nil {
		t.Fatal(err)
	}
	// The README's setting: steadyplane (v0.9.1) on PATH, the next
	// release's binary beside the data directory.
	pathDir := t.TempDir()
	if err := os.Symlink(v1, filepath.Join(pathDir, "steadyplane")); err != nil {
		t.Fatal(err)
	}
	if err := copyFile(v2, filepath.Join(work, "steadyplane-next")); err != nil {
		t.Fatal(err)
	}
	if err := testimage.BusyboxArchive(filepath.Join(dataDir, "images", "busybox.tar")); err != nil {
		t.Fatal(err)
	}
	kubectl := kubectlThroughRestarts(t, ctx, filepath.Join(dataDir, "admin.kubeconfig"))
	upgrade := func(args ...string) (string, error) {
		out, err := exec.CommandContext(ctx, v1, append([]string{"upgrade", "--data-dir", dataDir}, args...)...).CombinedOutput()
		t.Logf("steadyplane upgrade %v:\n%s", args, out)
		return string(out), err
	}

	up := testup.Start(t, v1, dataDir, ports)
	up.WaitUp(t, 4*time.Minute)
	pod := startKeptPod(t, kubectl, "7208")

	// Refused before anything changes.
	if out, err := upgrade("--binary", filepath.Join(t.TempDir(), "nothing")); err == nil || !strings.Contains(out, "no such file") {
		t.Errorf("upgrade to a missing binary: %v", err)
	}
	if out, err := upgrade("--rollback"); err == nil || !strings.Contains(out, "no release before v0.9.1") {
		t.Errorf("upgrade --rollback with nothing before: %v", err)
	}
	// The version-skew policy, against the running cluster: a release
	// minor skipped (v0.9 to v0.11) is refused with the rule it breaks.
	// Only its version is read: the broken build saying v0.11.0 will do.
	skipping, err := testenv.BrokenRelease("v0.11.0", info.Kubernetes)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := upgrade("--binary", skipping); err == nil || !strings.Contains(out, "refused, nothing changed") {
		t.Errorf("upgrade skipping a release minor: %v, want a refusal", err)
	}
	if b, err := os.ReadFile(filepath.Join(dataDir, release.StateFile)); err != nil || strings.Contains(string(b), "v0.11.0") {
		t.Errorf("a refused upgrade changed %s: %v\n%s", release.StateFile, err, b)
	}

	cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", block)
	cmd.Dir = work
	cmd.Env = append(os.Environ(), "PATH="+pathDir+":"+os.Getenv("PATH"))
	started := time.Now()
	out, err := cmd.CombinedOutput()
	t.Logf("the README's upgrade walkthrough (%v):\n%s", time.Since(started).Round(100*time.Millisecond), out)
	if err != nil {
		t.Fatalf("the README's upgrade walkthrough: %v", err)
	}
	text := string(out)
	for _, want := range []string{"Release:     v0.9.1", "runs release v0.9.2", "API server on release v0.9.2", "+steadyplane-v0.9.2", "runs release v0.9.1", "API server on release v0.9.1"} {
		if !strings.Contains(text, want) {
			t.Errorf("the walkthrough's output lacks %q", want)
		}
	}
	pod.unchanged("after the move to v0.9.2 and back")
	if reasons := pod.events(); strings.Contains(reasons, "Killing") {
		t.Errorf("the pod's events: %s; want no Killing", reasons)
	}

	out2, err := upgrade("--binary", broken)
	if err == nil || !strings.Contains(out2, "release v0.9.3 failed") {
		t.Fatalf("upgrade to the broken v0.9.3: %v, want a failure", err)
	}
	select {
	case <-time.After(30 * time.Second):
		t.Fatal("up did not exit with the broken release")
	case <-up.Done():
	}
	pod.processRuns("with the broken release's up gone") // no API server runs now
	// Started again as a service manager would: with the binary it was
	// first given. The data directory runs v0.9.1 again.
	up = testup.Start(t, v1, dataDir, ports)
	up.WaitUp(t, 4*time.Minute)
	if !strings.Contains(up.Text(), "release v0.9.3 failed (Exited") {
		t.Errorf("up started again does not say the broken release failed:\n%s", up.Text())
	}
	nodeRelease(t, kubectl, "v0.9.1")
	pod.unchanged("back on v0.9.1")

	// From a machine that is no server: the admin kubeconfig alone. The
	// binary reaches the server through the API server's node proxy, and
	// the operator rolls it, as over a cluster.
	admin := filepath.Join(dataDir, "admin.kubeconfig")
	remote, err := exec.CommandContext(ctx, v1, "upgrade", "--kubeconfig", admin, "--binary", filepath.Join(work, "steadyplane-next")).CombinedOutput()
	t.Logf("steadyplane upgrade --kubeconfig:\n%s", remote)
	if err != nil || !strings.Contains(string(remote), "server steadyplane has the binary") || !strings.Contains(string(remote), "every node runs release v0.9.2") {
		t.Fatalf("upgrade --kubeconfig to v0.9.2: %v", err)
	}
	nodeRelease(t, kubectl, "v0.9.2")
	pod.unchanged("on v0.9.2, rolled by the operator")

	// A release that starts, but one of whose components crash-loops
	// while the move settles: back to v0.9.1 (--rollback, through the
	// operator now that it rolls this server's releases), whose scheduler
	// is killed -9 as soon as it runs, twice. up hands the data directory
	// back to v0.9.2 in place (the same process), and the rollout stops
	// naming the component.
	moreOf := func(text string, n int, timeout time.Duration) {
		t.Helper()
		for deadline := time.Now().Add(timeout); strings.Count(up.Text(), text) <= n; time.Sleep(200 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("up did not say %q again within %v:\n%s", text, timeout, up.Text())
			}
		}
	}
	settles, ups := strings.Count(up.Text(), "it settles for"), strings.Count(up.Text(), "steadyplane is up")
	upgraded := make(chan string, 1)
	go func() {
		out, _ := upgrade("--rollback")
		upgraded <- out
	}()
	moreOf("it settles for", settles, 4*time.Minute)
	for i := range release.CrashLoopRestarts {
		pid := testup.KillComponent(t, dataDir, "scheduler")
		t.Logf("killed v0.9.1's scheduler (%d), %d of %d", pid, i+1, release.CrashLoopRestarts)
		for deadline := time.Now().Add(time.Minute); i+1 < release.CrashLoopRestarts; time.Sleep(200 * time.Millisecond) {
			if again := testup.ComponentPid(dataDir, "scheduler"); again != 0 && again != pid {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the scheduler was not started again within a minute of its kill")
			}
		}
	}
	select {
	case out := <-upgraded:
		if !strings.Contains(out, "release v0.9.1 stopped (CrashLoop)") || !strings.Contains(out, "kube-scheduler") {
			t.Errorf("upgrade --rollback to the crash-looping v0.9.1 says:\n%s\nwant it stopped (CrashLoop) naming the scheduler", out)
		}
	case <-time.After(4 * time.Minute):
		t.Fatal("upgrade did not end within 4 minutes of the crash loop")
	}
	if !strings.Contains(up.Text(), "handing back to v0.9.2") {
		t.Errorf("up does not say it handed back to v0.9.2")
	}
	// The same process goes on as v0.9.2's up.
	moreOf("steadyplane is up", ups+1, 4*time.Minute)
	nodeRelease(t, kubectl, "v0.9.2")
	if st, err := release.ReadState(dataDir); err != nil || st == nil || st.Reason != release.ReasonCrashLoop || st.Current.Release != "v0.9.2" {
		t.Errorf("the data directory's release after the crash loop: %+v, %v; want v0.9.2 running and CrashLoop recorded", st, err)
	}
	pod.unchanged("back on v0.9.2 after the crash loop")
	up.Stop(t)
}

// copyFile copies an executable.
func copyFile(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, b, 0o755)
}
