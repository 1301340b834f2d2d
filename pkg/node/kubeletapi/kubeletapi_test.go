package kubeletapi

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/steadyplane/steadyplane/pkg/binary"
	"github.com/steadyplane/steadyplane/pkg/node/runtime"
	"github.com/steadyplane/steadyplane/pkg/node/runtime/crilog"
	"github.com/steadyplane/steadyplane/pkg/node/stats"
)

func TestAttributes(t *testing.T) {
	u := &user.DefaultInfo{Name: "kube-apiserver-kubelet-client"}
	for _, tt := range []struct {
		method, path, verb, subresource string
	}{
		{"GET", "/containerLogs/default/p/c", "get", "proxy"},
		{"POST", "/exec/default/p/c", "create", "proxy"},
		{"GET", "/exec/default/p/c", "get", "proxy"},
		{"POST", "/portForward/default/p", "create", "proxy"},
		{"GET", "/logs/", "get", "log"},
		{"GET", "/logs", "get", "log"},
		{"GET", "/metrics", "get", "metrics"},
		{"GET", "/metrics/cadvisor", "get", "metrics"},
		{"GET", "/stats/summary", "get", "stats"},
		{"GET", "/pods", "get", "pods"},
		{"GET", "/healthz", "get", "healthz"},
		{"GET", "/podsX", "get", "proxy"},
		{"GET", "/metricsfoo", "get", "proxy"},
		{"DELETE", "/pods", "delete", "pods"},
		{"GET", "/releases/sha256:00", "get", "releases"},
		{"POST", "/volumes/local/pvc-1", "create", "volumes"},
		{"DELETE", "/volumes/local/pvc-1", "delete", "volumes"},
	} {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			a := Attributes(u, tt.method, tt.path, "n1")
			if a.GetVerb() != tt.verb || a.GetSubresource() != tt.subresource || a.GetResource() != "nodes" || a.GetName() != "n1" || !a.IsResourceRequest() {
				t.Errorf("= %s nodes/%s %s, want %s nodes/%s n1", a.GetVerb(), a.GetSubresource(), a.GetName(), tt.verb, tt.subresource)
			}
		})
	}
}

func TestLogRun(t *testing.T) {
	term := &corev1.ContainerStateTerminated{ExitCode: 1}
	for _, tt := range []struct {
		name     string
		status   corev1.ContainerStatus
		previous bool
		want     int32
		wantErr  string
	}{
		{name: "running, first run", status: corev1.ContainerStatus{State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}, want: 0},
		{name: "running after 2 restarts", status: corev1.ContainerStatus{RestartCount: 2, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}, LastTerminationState: corev1.ContainerState{Terminated: term}}, want: 2},
		{name: "previous of a running container", previous: true, status: corev1.ContainerStatus{RestartCount: 2, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}, LastTerminationState: corev1.ContainerState{Terminated: term}}, want: 1},
		{name: "previous without one", previous: true, status: corev1.ContainerStatus{State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}, wantErr: "previous terminated container"},
		{name: "crash loop back-off shows the run that ended", status: corev1.ContainerStatus{RestartCount: 3, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}, LastTerminationState: corev1.ContainerState{Terminated: term}}, want: 2},
		{name: "finished for good", status: corev1.ContainerStatus{RestartCount: 1, State: corev1.ContainerState{Terminated: term}}, want: 1},
		{name: "never started", status: corev1.ContainerStatus{State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CreateContainerConfigError"}}}, wantErr: "is waiting to start: CreateContainerConfigError"},
		{name: "no status yet", status: corev1.ContainerStatus{}, wantErr: "has not started"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tt.status.Name = "c"
			got, err := LogRun(tt.status, "p", tt.previous)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("LogRun = %d, %v; want error %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("LogRun = %d, %v; want %d", got, err, tt.want)
			}
		})
	}
}

func TestLogOptions(t *testing.T) {
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	ten, since := int64(10), metav1.NewTime(now.Add(-time.Hour))
	for _, tt := range []struct {
		name string
		in   corev1.PodLogOptions
		want time.Time
	}{
		{"sinceSeconds counts back from now", corev1.PodLogOptions{SinceSeconds: &ten}, now.Add(-10 * time.Second)},
		{"sinceTime as given", corev1.PodLogOptions{SinceTime: &since}, since.Time},
		{"neither: everything", corev1.PodLogOptions{Follow: true, Timestamps: true, TailLines: &ten}, time.Time{}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := LogOptions(&tt.in, now)
			if !got.Since.Equal(tt.want) || got.Follow != tt.in.Follow || got.Timestamp != tt.in.Timestamps || got.TailLines != tt.in.TailLines {
				t.Errorf("LogOptions = %+v, want since %v and the flags as given", got, tt.want)
			}
		})
	}
}

// fakeHost is one pod with one finished container whose two runs logged.
type fakeHost struct{ dir string }

func (h fakeHost) Container(ns, pod, uid, name string) (*Container, error) {
	if ns != "default" || pod != "p" || name != "c" {
		return nil, fmt.Errorf("pod %s/%s container %s: %w", ns, pod, name, ErrNotFound)
	}
	return &Container{
		Status: corev1.ContainerStatus{Name: "c", RestartCount: 1, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{}},
			LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1}}},
		LogPath: func(run int32) string { return filepath.Join(h.dir, fmt.Sprintf("%d.log", run)) },
	}, nil
}
func (fakeHost) PodNetNS(string, string, string) (string, error) { return "", nil }
func (fakeHost) Pods() *corev1.PodList                           { return &corev1.PodList{} }

// TestContainerLogs serves the routes without the auth filter (tested
// against a real API server in test/integration) over CRI log files.
func TestContainerLogs(t *testing.T) {
	dir := t.TempDir()
	for run, lines := range map[int][]string{0: {"first run"}, 1: {"one", "two", "three"}} {
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("%d.log", run)))
		if err != nil {
			t.Fatal(err)
		}
		w := crilog.NewFile(f).Stream("stdout")
		for _, l := range lines {
			fmt.Fprintln(w, l)
		}
		f.Close()
	}
	s := &Server{host: fakeHost{dir}}
	srv := httptest.NewServer(s.routes())
	defer srv.Close()
	for _, tt := range []struct {
		query, want string
		code        int
	}{
		{"", "one\ntwo\nthree\n", 200},
		{"?tailLines=1", "three\n", 200},
		{"?previous=true", "first run\n", 200},
		{"?limitBytes=5", "one\nt", 200},
		{"?tailLines=-1", "tailLines must be at least 0", 400},
		{"?sinceSeconds=x", "unable to decode query", 400},
	} {
		resp, err := http.Get(srv.URL + "/containerLogs/default/p/c" + tt.query)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tt.code || tt.code == 200 && string(body) != tt.want || !strings.Contains(string(body), tt.want) {
			t.Errorf("logs%s = %d %q, want %d %q", tt.query, resp.StatusCode, body, tt.code, tt.want)
		}
	}
	resp, err := http.Get(srv.URL + "/containerLogs/default/p/other")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("logs of an unknown container = %d, want 404", resp.StatusCode)
	}
}

// TestDialInNetNS dials a port on the host's loopback (the netns path "") and
// refuses a path that is not a namespace.
func TestDialInNetNS(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		c, err := l.Accept()
		if err == nil {
			_, _ = c.Write([]byte("hi"))
			c.Close()
		}
	}()
	port := int32(l.Addr().(*net.TCPAddr).Port)
	c, err := DialInNetNS(context.Background(), "", port)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(c)
	c.Close()
	if string(b) != "hi" {
		t.Errorf("read %q", b)
	}
	if _, err := DialInNetNS(context.Background(), filepath.Join(t.TempDir(), "none"), port); err == nil {
		t.Error("dialing in a namespace that does not exist succeeded")
	}
}

// TestReleases serves an installed binary by its digest, and nothing else.
func TestReleases(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(t.TempDir(), "steadyplane")
	if err := os.WriteFile(src, []byte("the next release"), 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := binary.Install(src, dir); err != nil {
		t.Fatal(err)
	}
	digest, err := binary.Digest(src)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer((&Server{host: fakeHost{t.TempDir()}, opts: Options{ReleaseDir: dir}}).routes())
	defer srv.Close()
	for _, tt := range []struct {
		digest string
		code   int
		body   string
	}{
		{digest, 200, "the next release"},
		{"sha256:" + strings.Repeat("0", 64), 404, "not found"},
		{"sha256:..%2F..%2Fetc%2Fpasswd", 400, "is no digest"},
		{"md5:00", 400, "is no digest"},
	} {
		resp, err := http.Get(srv.URL + "/releases/" + tt.digest)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tt.code || !strings.Contains(string(body), tt.body) {
			t.Errorf("GET /releases/%s = %d %q, want %d %q", tt.digest, resp.StatusCode, body, tt.code, tt.body)
		}
	}
	// Without a release directory there is no such endpoint.
	off := httptest.NewServer((&Server{host: fakeHost{t.TempDir()}}).routes())
	defer off.Close()
	if resp, err := http.Get(off.URL + "/releases/" + digest); err != nil || resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET /releases with no release directory: %v %v, want 404", resp, err)
	} else {
		resp.Body.Close()
	}
}

// TestReceiveRelease: PUT /releases/<digest> installs a body whose content
// is the digest, and nothing else.
func TestReceiveRelease(t *testing.T) {
	dir := t.TempDir()
	srv := httptest.NewServer((&Server{host: fakeHost{t.TempDir()}, opts: Options{ReleaseDir: dir}}).routes())
	defer srv.Close()
	content := []byte("a release handed in")
	sum := sha256.Sum256(content)
	digest := "sha256:" + hex.EncodeToString(sum[:])
	put := func(digest string, body []byte) (int, string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodPut, srv.URL+"/releases/"+digest, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, tt := range []struct {
		name   string
		digest string
		body   []byte
		code   int
		says   string
	}{
		{"another content", digest, []byte("something else"), 400, "not installed"},
		{"no digest", "md5:00", content, 400, "is no digest"},
		{"its content", digest, content, 201, "installed"},
		{"again", digest, content, 200, "here already"},
	} {
		if code, says := put(tt.digest, tt.body); code != tt.code || !strings.Contains(says, tt.says) {
			t.Errorf("%s: PUT = %d %q, want %d %q", tt.name, code, says, tt.code, tt.says)
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		t.Errorf("the release directory holds %v, want the one binary installed (nothing left of the refused ones)", entries)
	}
	// The name (12 hex digits of the digest) held by another binary, the
	// one that runs maybe: refused, not replaced.
	other := []byte("another release")
	osum := sha256.Sum256(other)
	odigest := "sha256:" + hex.EncodeToString(osum[:])
	holder := filepath.Join(dir, binary.Prefix+hex.EncodeToString(osum[:])[:12])
	if err := os.WriteFile(holder, []byte("the binary that runs"), 0o755); err != nil {
		t.Fatal(err)
	}
	if code, says := put(odigest, other); code != 400 || !strings.Contains(says, "holds another binary") {
		t.Errorf("PUT over a name another binary holds = %d %q, want 400 and a refusal", code, says)
	}
	if b, _ := os.ReadFile(holder); string(b) != "the binary that runs" {
		t.Errorf("the binary under that name became %q", b)
	}
	if path, err := binary.Find(dir, digest); err != nil {
		t.Errorf("the received binary is not found by its digest: %v", err)
	} else if st, err := os.Stat(path); err != nil || st.Mode().Perm() != binary.Mode {
		t.Errorf("the received binary: %v, %v; want mode %o", st, err, binary.Mode)
	}
}

func TestNodeAddress(t *testing.T) {
	n := &corev1.Node{Status: corev1.NodeStatus{
		Addresses:       []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: "s1"}, {Type: corev1.NodeInternalIP, Address: "10.0.0.1"}},
		DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: 10250}},
	}}
	if got := NodeAddress(n); got != "10.0.0.1:10250" {
		t.Errorf("NodeAddress = %q", got)
	}
	n.Status.DaemonEndpoints.KubeletEndpoint.Port = 0
	if got := NodeAddress(n); got != "" {
		t.Errorf("NodeAddress of a node with no port = %q, want none", got)
	}
}

// TestResourceMetrics: /metrics/resource is upstream's collector over the
// node's samples (the series and labels metrics-server parses), and
// /stats/summary their summary, rates from the sample before.
func TestResourceMetrics(t *testing.T) {
	at := time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)
	started := at.Add(-time.Minute)
	cpu := uint64(2e9)
	p := &stats.Provider{Read: func(context.Context) (stats.Sample, error) {
		at, cpu = at.Add(2*time.Second), cpu+1e9
		return stats.Sample{Time: at, Node: stats.NodeSample{Name: "n1", StartTime: at.Add(-time.Hour), CPUUsageNanoseconds: cpu * 4, MemoryCapacity: 4 << 30, MemoryAvailable: 3 << 30},
			Pods: []stats.PodSample{{Namespace: "ns", Name: "web", UID: "u1", StartTime: started, Containers: []stats.ContainerSample{
				{Name: "c", StartTime: started, Usage: runtime.Usage{CPUUsageNanoseconds: cpu, MemoryWorkingSet: 5 << 20}}}}}}, nil
	}}
	srv := httptest.NewServer((&Server{host: fakeHost{t.TempDir()}, opts: Options{Stats: p}}).routes())
	defer srv.Close()
	get := func(path string) string {
		t.Helper()
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %s %s", path, resp.Status, b)
		}
		return string(b)
	}
	metrics := get("/metrics/resource")
	for _, want := range []string{
		`container_cpu_usage_seconds_total{container="c",namespace="ns",pod="web"} 3`,
		`container_memory_working_set_bytes{container="c",namespace="ns",pod="web"} 5.24288e+06`,
		`container_start_time_seconds{container="c",namespace="ns",pod="web"}`,
		`pod_cpu_usage_seconds_total{namespace="ns",pod="web"} 3`,
		`node_cpu_usage_seconds_total 12`,
		`node_memory_working_set_bytes 1.073741824e+09`,
		`scrape_error 0`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics/resource lacks %q:\n%s", want, metrics)
		}
	}
	var summary statsapi.Summary
	if err := json.Unmarshal([]byte(get("/stats/summary?only_cpu_and_memory=true")), &summary); err != nil {
		t.Fatal(err)
	}
	if summary.Node.NodeName != "n1" || len(summary.Pods) != 1 || summary.Pods[0].CPU.UsageNanoCores == nil || *summary.Pods[0].CPU.UsageNanoCores != 5e8 {
		t.Errorf("summary %+v; want node n1 and pod web at half a core", summary)
	}
}
