package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/steadyplane/steadyplane/internal/testenv"
	"github.com/steadyplane/steadyplane/internal/testimage"
	"github.com/steadyplane/steadyplane/internal/testup"
	"github.com/steadyplane/steadyplane/pkg/buildinfo"
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

// TestHandRestartWithNextReleaseKeepsPods is the k3s way of upgrading,
// by hand: up of release v0.9.1 runs with --stop-pods-on-exit=false and
// a pod; SIGTERM stops its control plane and leaves the pod's container
// running; up of v0.9.2 on the same data directory adopts it: the same
// container and process, no restart, and the pod never stopped being
// Ready. The Node then shows the new release.
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
	kubeconfig := filepath.Join(dataDir, "admin.kubeconfig")
	// The API server restarts once more after the second up: the
	// operator rolls a revision of it onto the new binary. One server has
	// nothing to fail over to meanwhile, so refusals are waited out.
	kubectl := func(args ...string) string {
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

	first := testup.Start(t, current, dataDir, ports, "--stop-pods-on-exit=false")
	first.WaitUp(t, 4*time.Minute)
	// An argument no other test's pod has, to find its process.
	const sleepFor = "7207"
	kubectl("run", "sleeper", "--image="+testimage.BusyboxName, "--", "sleep", sleepFor)
	kubectl("wait", "--for=condition=Ready", "pod/sleeper", "--timeout=120s")
	const state = `jsonpath={.status.containerStatuses[0].containerID} {.status.containerStatuses[0].restartCount} {.status.conditions[?(@.type=="Ready")].status} {.status.conditions[?(@.type=="Ready")].lastTransitionTime}`
	before := kubectl("get", "pod", "sleeper", "-o", state)
	sleeper := func() []int {
		return procfs.Find(func(argv []string) bool { return len(argv) == 2 && argv[0] == "sleep" && argv[1] == sleepFor })
	}
	pids := sleeper()
	if len(pids) != 1 {
		t.Fatalf("want one process of the pod, found %v", pids)
	}

	first.Stop(t)
	stopped := time.Now()
	if got := sleeper(); len(got) != 1 || got[0] != pids[0] {
		t.Fatalf("the pod's process %d is gone after up stopped with --stop-pods-on-exit=false (now %v)", pids[0], got)
	}
	binDir := filepath.Join(dataDir, "bin") + "/"
	if left := procfs.Find(func(argv []string) bool { return len(argv) > 0 && strings.HasPrefix(argv[0], binDir) }); len(left) > 0 {
		t.Errorf("control-plane processes still run after up stopped: %v", left)
	}

	second := testup.Start(t, next, dataDir, ports)
	second.WaitUp(t, 4*time.Minute)
	t.Logf("up of the next release was up %v after the first stopped", time.Since(stopped).Round(100*time.Millisecond))
	want := "+steadyplane-v0.9.2"
	var version string
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline) && !strings.HasSuffix(version, want); time.Sleep(500 * time.Millisecond) {
		version = kubectl("get", "node", "-o", "jsonpath={.items[0].status.nodeInfo.kubeletVersion}")
	}
	if !strings.HasSuffix(version, want) {
		t.Errorf("the Node's version is %q after up of v0.9.2, want it to end in %s", version, want)
	}
	var after string
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		after = kubectl("get", "pod", "sleeper", "-o", state)
		if after == before && strings.Contains(kubectl("get", "events", "--field-selector", "involvedObject.name=sleeper", "-o", "jsonpath={.items[*].reason}"), "Adopted") {
			break
		}
	}
	if after != before {
		t.Errorf("the pod changed over the restart (container ID, restarts, Ready, since):\n before %s\n after  %s", before, after)
	}
	if got := sleeper(); len(got) != 1 || got[0] != pids[0] {
		t.Errorf("the pod's process %d did not survive the upgrade (now %v)", pids[0], got)
	}
	revisions := `jsonpath={.status.latestAvailableRevision} {.status.conditions[?(@.type=="Progressing")].status}`
	var rollout string
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline) && !strings.HasSuffix(rollout, " False"); time.Sleep(time.Second) {
		rollout = kubectl("get", "kubeapiserver", "cluster", "-o", revisions)
	}
	t.Logf("the API server's latest revision and Progressing after the restart: %s", rollout)
	if got := kubectl("get", "pod", "sleeper", "-o", state); got != before {
		t.Errorf("the pod changed while the API server moved to the new binary:\n before %s\n after  %s", before, got)
	}
	if reasons := kubectl("get", "events", "--field-selector", "involvedObject.name=sleeper", "-o", "jsonpath={.items[*].reason}"); !strings.Contains(reasons, "Adopted") || strings.Contains(reasons, "Killing") {
		t.Errorf("the pod's events: %s; want Adopted and no Killing", reasons)
	}
	second.Stop(t)
	if got := sleeper(); len(got) != 0 {
		t.Errorf("the pod's process still runs after up stopped (it stops pods by default): %v", got)
	}
}
