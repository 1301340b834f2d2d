package agent

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/steadyplane/steadyplane/internal/testproc"
)

func TestProcessLifecycle(t *testing.T) {
	dir := t.TempDir()
	c := &corev1.Container{Name: "c", Command: []string{"sh", "-c"}, Args: []string{"echo $GREETING $(POD); trap 'echo bye; exit 0' TERM; while :; do sleep 0.05; done"},
		Env: []corev1.EnvVar{{Name: "POD", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}, {Name: "GREETING", Value: "hello $(POD)"}}}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p1", Namespace: "ns"}}
	env, err := containerEnv(pod, c, "127.0.0.1", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(env, "\n"), "GREETING=hello p1") {
		t.Errorf("env: %v", env)
	}
	log, pidPath := filepath.Join(dir, "0.log"), filepath.Join(dir, "pid")
	p, err := startProcess(c, env, log, pidPath, true)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	p.stop(5 * time.Second)
	code, _ := p.result()
	b, _ := os.ReadFile(log)
	if code != 0 || !strings.Contains(string(b), "bye") {
		t.Errorf("SIGTERM: exit %d, log %q; want a clean exit through the trap", code, b)
	}

	stubborn := &corev1.Container{Name: "s", Command: []string{"sh", "-c", "trap '' TERM; while :; do sleep 0.05; done"}}
	p, err = startProcess(stubborn, env, log, pidPath, true)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	start := time.Now()
	p.stop(300 * time.Millisecond)
	if code, _ := p.result(); code != 128+int32(syscall.SIGKILL) || time.Since(start) > 3*time.Second {
		t.Errorf("a container ignoring SIGTERM: exit %d after %v; want SIGKILL after the grace period", code, time.Since(start))
	}

	if _, err := containerEnv(pod, &corev1.Container{Env: []corev1.EnvVar{{Name: "S", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{}}}}}, "", ""); err == nil {
		t.Error("a Secret reference was accepted")
	}
	if _, err := startProcess(&corev1.Container{Name: "x"}, env, log, pidPath, true); err == nil {
		t.Error("a container without a command started")
	}
}

func TestStopLeftover(t *testing.T) {
	dir := t.TempDir()
	pidPath := filepath.Join(dir, "pid")
	c := &corev1.Container{Name: "c", Command: []string{"sleep", "60"}}
	p, err := startProcess(c, nil, filepath.Join(dir, "log"), pidPath, false)
	if err != nil {
		t.Fatal(err)
	}
	if !stopLeftover(pidPath, time.Second) {
		t.Fatal("the running process in the pid file was not found")
	}
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		t.Fatal("the leftover process is still running")
	}
	if _, err := os.Stat(pidPath); !os.IsNotExist(err) {
		t.Error("pid file kept")
	}
	// A pid file naming a live process with another start time (a reused
	// pid) must not touch it: here, this test process itself.
	os.WriteFile(pidPath, []byte(fmt.Sprintf("%d 1\n", os.Getpid())), 0o600)
	if stopLeftover(pidPath, time.Second) {
		t.Error("a reused pid was taken for a leftover")
	}
	os.WriteFile(pidPath, []byte("garbage"), 0o600)
	if stopLeftover(pidPath, time.Second) {
		t.Error("a torn pid file was taken for a leftover")
	}
}

// TestContainerExitEndsItsGroup: a container whose main process exits by
// itself takes what it left in its process group with it.
func TestContainerExitEndsItsGroup(t *testing.T) {
	dir := t.TempDir()
	childFile := filepath.Join(dir, "child")
	c := &corev1.Container{Name: "c", Command: []string{"sh", "-c", "sleep 300 & echo $! > " + childFile + "; exit 0"}}
	p, err := startProcess(c, nil, filepath.Join(dir, "log"), filepath.Join(dir, "pid"), true)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the container did not exit")
	}
	b, err := os.ReadFile(childFile)
	if err != nil {
		t.Fatal(err)
	}
	var child int
	if _, err := fmt.Sscanf(string(b), "%d", &child); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for testproc.Alive(child) {
		if time.Now().After(deadline) {
			syscall.Kill(child, syscall.SIGKILL)
			t.Fatalf("the container's background child %d outlived it", child)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
