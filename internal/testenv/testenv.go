// Package testenv provides what integration tests, end-to-end tests and
// benchmark programs need to run real steadyplane processes: the binary, kubectl,
// free loopback ports and a started control plane.
package testenv

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"time"
)

// BinaryEnv names an environment variable holding the path of a prebuilt
// steadyplane binary; CI builds it once and shares it between packages.
const BinaryEnv = "STEADYPLANE_BIN"

// KubectlEnv names an environment variable holding the path of kubectl.
const KubectlEnv = "STEADYPLANE_KUBECTL"

var (
	buildOnce sync.Once
	built     string
	buildErr  error
)

// ModuleRoot returns the directory of the steadyplane module (the one holding go.mod).
func ModuleRoot() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", fmt.Errorf("cannot locate the module")
	}
	return filepath.Abs(filepath.Join(filepath.Dir(file), "..", ".."))
}

// Binary returns the steadyplane binary: $STEADYPLANE_BIN if set, else one
// built from this checkout (once per process) into a temporary directory.
func Binary() (string, error) {
	if p := os.Getenv(BinaryEnv); p != "" {
		return filepath.Abs(p)
	}
	buildOnce.Do(func() {
		built, buildErr = goBuild("./cmd/steadyplane", "steadyplane")
	})
	return built, buildErr
}

// ReleaseFlag is the -X setting that gives a build its steadyplane
// release, as release builds do.
const ReleaseFlag = "github.com/steadyplane/steadyplane/pkg/buildinfo.Release"

var (
	releasesMu sync.Mutex
	releases   = map[string]string{}
)

// BinaryOfRelease builds this checkout as steadyplane release (once per
// process and release), the way a release is built:
// go build -ldflags "-X <ReleaseFlag>=<release>". Only the link is new
// work when the build cache holds the packages.
func BinaryOfRelease(release string) (string, error) {
	releasesMu.Lock()
	defer releasesMu.Unlock()
	if p, ok := releases[release]; ok {
		return p, nil
	}
	p, err := goBuild("./cmd/steadyplane", "steadyplane", "-ldflags", "-X "+ReleaseFlag+"="+release)
	if err != nil {
		return "", err
	}
	releases[release] = p
	return p, nil
}

// BrokenRelease builds internal/testrelease/badup as release, speaking
// Kubernetes kubernetes: a steadyplane binary whose version says so and
// whose up exits at start.
func BrokenRelease(release, kubernetes string) (string, error) {
	return goBuild("./internal/testrelease/badup", "steadyplane", "-ldflags", "-X main.release="+release+" -X main.kubernetes="+kubernetes)
}

var (
	kubectlOnce sync.Once
	kubectl     string
	kubectlErr  error
)

// Kubectl returns a kubectl: $STEADYPLANE_KUBECTL, else the one on PATH, else
// one built from the k8s.io/kubernetes module this project already requires.
func Kubectl() (string, error) {
	if p := os.Getenv(KubectlEnv); p != "" {
		return filepath.Abs(p)
	}
	if p, err := exec.LookPath("kubectl"); err == nil {
		return p, nil
	}
	kubectlOnce.Do(func() {
		kubectl, kubectlErr = goBuild("k8s.io/kubernetes/cmd/kubectl", "kubectl")
	})
	return kubectl, kubectlErr
}

func goBuild(pkg, name string, flags ...string) (string, error) {
	root, err := ModuleRoot()
	if err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp("", "steadyplane-build-")
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, name)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", append(append([]string{"build", "-o", out}, flags...), pkg)...)
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %v\n%s", pkg, err, b)
	}
	return out, nil
}

// FreePorts returns n distinct TCP ports that were free on 127.0.0.1 a moment
// ago. All are held open until the last is found, so they differ.
func FreePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// WaitListening waits until something accepts TCP connections on addr, or
// until ctx ends.
func WaitListening(ctx context.Context, addr string, exited <-chan struct{}) error {
	for {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not listening: %w (last error %v)", addr, ctx.Err(), err)
		case <-exited:
			return fmt.Errorf("process exited before %s was listening", addr)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// IsLoopbackURL reports whether a URL's host is a loopback address; tests
// assert it before they dial anything.
func IsLoopbackURL(u string) bool {
	parsed, err := url.Parse(u)
	if err != nil {
		return false
	}
	ip := net.ParseIP(parsed.Hostname())
	return ip != nil && ip.IsLoopback()
}

// Median is the middle of ds (the upper one of an even count), for the
// benchmark programs' figures; ds must not be empty.
func Median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
