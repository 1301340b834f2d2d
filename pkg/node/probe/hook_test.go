package probe

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// TestRunHook: hooks as the kubelet's handler runner decides them: an exec
// hook fails on a non-zero exit with its output in the message, an HTTP hook
// on a request that gets no answer (a 500 is an answer), a sleep when its
// container stops first; the messages are the kubelet's.
func TestRunHook(t *testing.T) {
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.URL.Path+" "+r.Header.Get("X-Hook")+" "+r.UserAgent())
		w.WriteHeader(http.StatusInternalServerError)
	}))
	defer srv.Close()
	_, portStr, _ := net.SplitHostPort(srv.Listener.Addr().String())
	port := intstr.Parse(portStr)
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	dead := intstr.FromInt32(int32(l.Addr().(*net.TCPAddr).Port))
	l.Close()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns", UID: "u1"}}
	c := &corev1.Container{Name: "c", Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: port.IntVal}}}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	tests := []struct {
		name    string
		ctx     context.Context
		hook    corev1.LifecycleHandler
		wantErr bool
		wantMsg string
	}{
		{"exec ok", context.Background(), corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}}, false, ""},
		{"exec fails", context.Background(), corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"sh", "-c", "echo no room; exit 4"}}}, true,
			`Exec lifecycle hook ([sh -c echo no room; exit 4]) for Container "c" in Pod "web_ns(u1)" failed - error: exit status 4, message: "no room\n"`},
		{"exec cut by the container's end", cancelled, corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"sleep", "5"}}}, true, "error: signal: killed"},
		{"http answered 500", context.Background(), corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/stop", Port: intstr.FromString("http"),
			HTTPHeaders: []corev1.HTTPHeader{{Name: "X-Hook", Value: "pre"}}}}, false, ""},
		{"http refused", context.Background(), corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/stop", Port: dead}}, true,
			`HTTP lifecycle hook (/stop) for Container "c" in Pod "web_ns(u1)" failed - error: `},
		{"http unknown port name", context.Background(), corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{Port: intstr.FromString("nope")}}, true, "not a number nor a named port"},
		{"sleep 0", context.Background(), corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 0}}, false, ""},
		{"sleep cut", cancelled, corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 30}}, true,
			`Sleep lifecycle hook (30) for Container "c" in Pod "web_ns(u1)" failed - error: container terminated before sleep hook finished`},
		{"no handler", context.Background(), corev1.LifecycleHandler{}, true, "Cannot run handler: invalid handler"},
	}
	for _, tt := range tests {
		start := time.Now()
		msg, err := RunHook(tt.ctx, &tt.hook, pod, "127.0.0.1", c, hostCommand)
		if (err != nil) != tt.wantErr || !strings.Contains(msg, tt.wantMsg) || (err == nil) != (msg == "") {
			t.Errorf("%s: RunHook = %q, %v; want error %v with %q", tt.name, msg, err, tt.wantErr, tt.wantMsg)
		}
		if time.Since(start) > 3*time.Second {
			t.Errorf("%s took %v", tt.name, time.Since(start))
		}
	}
	if len(got) != 1 || !strings.HasPrefix(got[0], "/stop pre kube-lifecycle/") {
		t.Errorf("the HTTP hook's requests: %q, want one GET /stop with its header and the kubelet's User-Agent", got)
	}
}
