package integration

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/steadyplane/steadyplane/internal/testenv"
	"github.com/steadyplane/steadyplane/pkg/controlplane"
	"github.com/steadyplane/steadyplane/pkg/node/localstatus"
)

// testNodeAPI checks kubectl logs, exec and port-forward through the API
// server, which reaches the node API with its kubelet client certificate,
// and that the node API itself lets only authorized callers in.
func testNodeAPI(ctx context.Context, t *testing.T, cp *controlplane.ControlPlane, o controlplane.Options, dir string, cs kubernetes.Interface) {
	pods := cs.CoreV1().Pods("default")
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "api-py"}, Spec: corev1.PodSpec{RuntimeClassName: testenv.HostRoot(), NodeName: o.NodeName, TerminationGracePeriodSeconds: &shortGrace,
		Containers: []corev1.Container{{Name: "web", Image: "local/python", Command: []string{"/usr/bin/python3", "-u", "-m", "http.server", "8080"}, WorkingDir: "/",
			ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/", Port: intstr.FromInt32(8080)}}, PeriodSeconds: 1}}}}}
	if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = pods.Delete(context.WithoutCancel(ctx), "api-py", metav1.DeleteOptions{}) }()
	waitReady(ctx, t, cs, "api-py", corev1.ConditionTrue, "")

	if got := strings.TrimSpace(kubectlOut(ctx, t, cp, "exec", "api-py", "--", "hostname")); got != "api-py" {
		t.Errorf("kubectl exec api-py -- hostname = %q, want the pod's name", got)
	}
	k, err := testenv.Kubectl()
	if err != nil {
		t.Fatal(err)
	}
	kubectl := func(args ...string) *exec.Cmd {
		return exec.CommandContext(ctx, k, append([]string{"--kubeconfig", cp.Kubeconfig()}, args...)...)
	}
	err = kubectl("exec", "api-py", "--", "sh", "-c", "exit 3").Run()
	var exitErr *exec.ExitError
	if !errors.As(err, &exitErr) || exitErr.ExitCode() != 3 {
		t.Errorf("kubectl exec of a command that exits 3: %v, want exit code 3", err)
	}

	// The readiness probe's requests are in the log; follow sees new ones.
	if out := kubectlOut(ctx, t, cp, "logs", "api-py", "--tail=1"); !strings.Contains(out, "GET / HTTP/1.1") {
		t.Errorf("kubectl logs --tail=1 = %q, want a probe's request", out)
	}
	follow := kubectl("logs", "-f", "api-py", "--tail=0")
	stdout, err := follow.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := follow.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	select {
	case l := <-lines:
		if !strings.Contains(l, "GET / ") {
			t.Errorf("kubectl logs -f streamed %q, want a probe's request", l)
		}
	case <-time.After(15 * time.Second):
		t.Error("kubectl logs -f streamed nothing in 15s while the probe ran every second")
	}
	_ = follow.Process.Kill()
	_ = follow.Wait()

	// Port-forward into the pod's network namespace.
	pf := kubectl("port-forward", "pod/api-py", ":8080")
	pfOut, err := pf.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := pf.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = pf.Process.Kill(); _ = pf.Wait() }()
	line, err := bufio.NewReader(pfOut).ReadString('\n')
	m := regexp.MustCompile(`127\.0\.0\.1:(\d+) -> 8080`).FindStringSubmatch(line)
	if err != nil || m == nil {
		t.Fatalf("kubectl port-forward printed %q (%v)", line, err)
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Get("http://127.0.0.1:" + m[1] + "/")
	if err != nil {
		t.Fatalf("through kubectl port-forward: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), "Directory listing") {
		t.Errorf("through kubectl port-forward: %d %q", resp.StatusCode, body)
	}

	// The node API directly: who may read a container's log.
	admin, err := cp.AdminConfig()
	if err != nil {
		t.Fatal(err)
	}
	node := rest.CopyConfig(admin)
	creds := filepath.Join(dir, "credentials", "node-"+o.NodeName, "node-"+o.NodeName)
	node.CertFile, node.KeyFile, node.CertData, node.KeyData = creds+".crt", creds+".key", nil, nil
	anonymous := rest.AnonymousClientConfig(admin)
	// At the Node's address (the harness's own, on its pod bridge).
	url := "https://" + net.JoinHostPort(nodeIP(ctx, t, cs, o.NodeName), strconv.Itoa(o.NodeAPIPort)) + "/containerLogs/default/api-py/web?tailLines=1"
	for _, c := range []struct {
		who  string
		cfg  *rest.Config
		want int
	}{
		{"no credentials", anonymous, http.StatusUnauthorized},
		{"the node's own certificate (no nodes/log)", node, http.StatusForbidden},
		{"the admin (system:masters)", admin, http.StatusOK},
	} {
		// The node API serves a certificate of the kubelet CA, which only
		// its callers trust (the cluster CA's clients do not).
		cfg := rest.CopyConfig(c.cfg)
		cfg.CAData, cfg.CAFile = nil, filepath.Join(dir, "pki", "kubelet-ca.crt")
		tlsCfg, err := rest.TLSConfigFor(cfg)
		if err != nil {
			t.Fatal(err)
		}
		client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsCfg}}
		resp, err := client.Get(url)
		if err != nil {
			t.Fatalf("%s: %v", c.who, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Errorf("node API as %s: %d %q, want %d", c.who, resp.StatusCode, body, c.want)
		}
	}
	// TLS verification is on: a client that does not trust the cluster CA
	// gets no answer.
	if _, err := (&http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{MinVersion: tls.VersionTLS12}}}).Get(url); err == nil {
		t.Error("the node API's certificate was accepted without the cluster CA")
	}

	// The unauthenticated loopback endpoint serves the static pods' records
	// alone: a pod of the API is for the node API's callers.
	if rec := localRecord(ctx, t, o, "api-py"); rec != nil {
		t.Errorf("the read-only loopback endpoint serves the record of api-py, a pod of the API: %+v", rec)
	}
}

// diskRecord reads the node agent's record of the pod ns/name from the
// node's disk (the loopback endpoint serves static pods' alone); nil if
// there is none.
func diskRecord(t *testing.T, o controlplane.Options, ns, name string) *localstatus.Pod {
	t.Helper()
	dirs, err := filepath.Glob(filepath.Join(o.DataDir, "node", "pods", ns+"_"+name+"_*"))
	if err != nil || len(dirs) == 0 {
		return nil
	}
	rec, err := localstatus.Read(dirs[len(dirs)-1])
	if err != nil {
		return nil
	}
	return rec
}

// localRecord reads the node agent's record of static pod name from its
// read-only endpoint; nil if there is none.
func localRecord(ctx context.Context, t *testing.T, o controlplane.Options, name string) *localstatus.Pod {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/localstatus/pods", o.NodeMetricsPort), nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var recs []localstatus.Pod
	if err := json.NewDecoder(resp.Body).Decode(&recs); err != nil {
		t.Fatal(err)
	}
	for i := range recs {
		if recs[i].Name == name {
			return &recs[i]
		}
	}
	return nil
}
