package testenv

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/steadyplane/steadyplane/internal/testimage"
)

// ClusterHost is one host of a cluster laid out on a Network: a server
// (up; the first makes the cluster, the others join it with its server
// token) or a worker (node, with its node token), in a directory of its
// own under the network's host name.
type ClusterHost struct {
	// Index is the host's in the Network.
	Index int
	// Name is its Node's ("steadyplane" for the first server, up's
	// default; the host name for the others), HostName its host name.
	Name, HostName string
	// IP is its address, Dir its working directory.
	IP, Dir string
	// Server says it runs up; Args are its command's arguments (after the
	// binary), the same at every start.
	Server bool
	Args   []string
}

// DataDir is where the host keeps its state: up's data directory, or a
// worker's root directory.
func (h *ClusterHost) DataDir() string {
	if h.Server {
		return filepath.Join(h.Dir, ".steadyplane")
	}
	return filepath.Join(h.Dir, "node")
}

// ImagesDir is the directory of images the host imports at start.
func (h *ClusterHost) ImagesDir() string {
	if h.Server {
		return filepath.Join(h.DataDir(), "images")
	}
	return filepath.Join(h.Dir, "images")
}

// Command runs bin with the host's arguments in its network namespace and
// directory, as a service manager starts it.
func (h *ClusterHost) Command(nw *Network, bin string) *exec.Cmd {
	name, args := nw.NSEnter(h.Index, h.HostName, bin, h.Args...)
	cmd := exec.Command(name, args...)
	cmd.Dir = h.Dir
	return cmd
}

// TakeToken copies the join token a joining host needs from the first
// server's data directory into its own directory: the server token for a
// server, the node token for a worker.
func (h *ClusterHost) TakeToken(first *ClusterHost) error {
	name := "token"
	if !h.Server {
		name = "node-token"
	}
	b, err := os.ReadFile(filepath.Join(first.DataDir(), name))
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(h.Dir, name), b, 0o600)
}

// ClusterLayout lays out servers servers and then workers workers on nw's
// hosts (which must number at least both) under work, with the pods'
// range podRange (a /16 no route uses; each node gets a /24 of it) and a
// resolver file with no nameserver. Each host's image directory holds the
// tests' busybox image.
func ClusterLayout(nw *Network, work string, servers, workers int, podRange string) ([]*ClusterHost, error) {
	if servers < 1 || servers+workers > len(nw.Hosts) {
		return nil, fmt.Errorf("ClusterLayout: %d servers and %d workers on %d hosts", servers, workers, len(nw.Hosts))
	}
	resolv := filepath.Join(work, "resolv.conf")
	if err := os.WriteFile(resolv, []byte("# no nameserver: nothing resolved off the machine\n"), 0o644); err != nil {
		return nil, err
	}
	firstPods := podRange[:len(podRange)-len("0.0/16")] + "0.0/24"
	var hosts []*ClusterHost
	for i := range servers + workers {
		h := &ClusterHost{Index: i, Server: i < servers, IP: nw.Hosts[i].IP.String(), Dir: filepath.Join(work, fmt.Sprintf("host%d", i+1))}
		first := "https://" + nw.Hosts[0].IP.String() + ":6443"
		switch {
		case i == 0:
			h.Name, h.HostName = "steadyplane", "s1"
			h.Args = []string{"up", "--bind-address", h.IP, "--data-dir", h.DataDir()}
		case h.Server:
			h.HostName = fmt.Sprintf("s%d", i+1)
			h.Args = []string{"up", "--bind-address", h.IP, "--data-dir", h.DataDir(), "--server", first, "--token-file", filepath.Join(h.Dir, "token")}
		default:
			h.HostName = fmt.Sprintf("w%d", i+1)
			h.Args = []string{"node", "--server", first, "--token-file", filepath.Join(h.Dir, "node-token"), "--node-ip", h.IP, "--root-dir", h.DataDir(),
				"--image-import-dir", h.ImagesDir()}
		}
		if h.Name == "" {
			h.Name = h.HostName
		}
		h.Args = append(h.Args, "--runtime", "runc", "--resolv-conf", resolv)
		if h.Server {
			h.Args = append(h.Args, "--cluster-cidr", podRange, "--pod-cidr", firstPods)
		}
		if err := os.MkdirAll(h.ImagesDir(), 0o700); err != nil {
			return nil, err
		}
		if err := testimage.BusyboxArchive(filepath.Join(h.ImagesDir(), "busybox.tar")); err != nil {
			return nil, err
		}
		hosts = append(hosts, h)
	}
	return hosts, nil
}

// CleanHost stops and unmounts what host h left running (after its
// process was killed): for a server, steadyplane cleanup of bin on its data
// directory.
func CleanHost(nw *Network, h *ClusterHost, bin string) {
	if !h.Server {
		CleanNode(h.DataDir())
		return
	}
	CleanNode(filepath.Join(h.DataDir(), "node"))
	name, args := nw.NSEnter(h.Index, h.HostName, bin, "cleanup", "--data-dir", h.DataDir())
	_ = exec.Command(name, args...).Run()
}

// ReadyNodes are the names of the Ready Nodes, sorted (nil when they
// cannot be listed).
func ReadyNodes(ctx context.Context, client kubernetes.Interface) []string {
	list, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil
	}
	var ready []string
	for _, n := range list.Items {
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				ready = append(ready, n.Name)
			}
		}
	}
	slices.Sort(ready)
	return ready
}

// WaitReadyNodes waits, polling every second, until at least n Nodes are
// Ready, or timeout passes (or ctx ends).
func WaitReadyNodes(ctx context.Context, client kubernetes.Interface, n int, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var ready []string
	for {
		if ready = ReadyNodes(ctx, client); len(ready) >= n {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d Nodes not Ready within %s (Ready: %v): %w", n, timeout, ready, ctx.Err())
		case <-time.After(time.Second):
		}
	}
}
