package node

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	nodeutil "k8s.io/component-helpers/node/util"

	"github.com/steadyplane/steadyplane/pkg/binary"
	"github.com/steadyplane/steadyplane/pkg/fallback/release"
)

// A worker (node --server) moves to another release as a server's up
// does, in place: its root directory holds the release State and the
// installed binaries, the operator asks it to move through its Node
// (release.Follower), and it hands over by exec of the new binary with
// the same arguments, as a crash of the agent would end it: runc's
// containers outlive it and the new agent adopts them. A release that
// does not bring the Node back Ready within workerUpTimeout hands back.

// workerUpTimeout bounds a move's first start: the Node Ready on it.
const workerUpTimeout = 2 * time.Minute

// workerReleasePoll is how often a worker looks for a move asked of it.
const workerReleasePoll = time.Second

// runFromRootDir runs the worker from its root directory's copy of the
// binary its release State chooses (release.Choose), exec'ing it unless
// it is this process's. It returns nil to go on here.
func (c *Config) runFromRootDir() error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	root, err := filepath.EvalSymlinks(c.Agent.RootDir)
	if err != nil {
		return err
	}
	installed, err := binary.Install(self, filepath.Join(root, "bin"))
	if err != nil {
		return err
	}
	run, err := release.Choose(root, installed, c.printf)
	if err != nil || run == self {
		return err
	}
	return syscall.Exec(run, os.Args, os.Environ())
}

// handBack ends a move's first start that failed with err: the previous
// binary takes the worker back. Otherwise it returns err.
func (c *Config) handBack(err error) error {
	return release.HandBack(c.Agent.RootDir, err, c.printf, func(binary string) error {
		return syscall.Exec(binary, os.Args, os.Environ())
	})
}

// followRelease marks a move done once the Node is Ready on this binary
// (or hands back when it is not within workerUpTimeout), then follows the
// cluster's rollout and hands over when a move is asked for.
func (c *Config) followRelease(ctx context.Context, cfg *rest.Config) {
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		c.printf("release: %v; this node does not follow the cluster's release", err)
		return
	}
	root := c.Agent.RootDir
	// Ready as this process posts it: the Node keeps the Ready of the
	// process it replaced until then.
	started := time.Now()
	if err := waitNodeReady(ctx, client, c.Agent.NodeName, started, workerUpTimeout); err != nil {
		if ctx.Err() != nil {
			return
		}
		// A move's first start hands back (and returns only when it
		// cannot); any other start waits on.
		c.printf("release: %v", c.handBack(err))
		if waitNodeReady(ctx, client, c.Agent.NodeName, started, time.Duration(1<<62)) != nil {
			return
		}
	}
	release.MarkUp(root, c.printf)
	f := &release.Follower{Client: client, NodeName: c.Agent.NodeName, DataDir: root, Peer: cfg, Progress: c.printf}
	go f.Run(ctx)
	t := time.NewTicker(workerReleasePoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if target := release.Requested(root, c.printf); target != "" {
			c.printf("moving to another release: the node agent hands over, the pods keep running")
			err := syscall.Exec(target, os.Args, os.Environ())
			// Still here: the move failed, and is not asked for again.
			release.Fail(root, release.ReasonStartFailed, fmt.Sprintf("exec %s: %v", target, err), c.printf)
		}
	}
}

// waitNodeReady waits until the Node is Ready with a heartbeat after
// since, within timeout.
func waitNodeReady(ctx context.Context, client kubernetes.Interface, name string, since time.Time, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	last := errors.New("not read yet")
	for {
		n, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			_, cond := nodeutil.GetNodeCondition(&n.Status, corev1.NodeReady)
			if cond != nil && cond.Status == corev1.ConditionTrue && cond.LastHeartbeatTime.After(since) {
				return nil
			}
			last = errors.New("not Ready as this process posts it")
		} else {
			last = err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("node %s was not Ready within %s: %v", name, timeout, last)
		case <-time.After(time.Second):
		}
	}
}
