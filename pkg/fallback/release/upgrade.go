package release

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilversion "k8s.io/apimachinery/pkg/util/version"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/steadyplane/steadyplane/pkg/binary"
	"github.com/steadyplane/steadyplane/pkg/buildinfo"
	"github.com/steadyplane/steadyplane/pkg/fallback/apis/v1alpha1"
	"github.com/steadyplane/steadyplane/pkg/fallback/operator"
	"github.com/steadyplane/steadyplane/pkg/procfs"
)

// UpgradeOptions are steadyplane upgrade's.
type UpgradeOptions struct {
	// DataDir is the server's data directory.
	DataDir string
	// Kubeconfig, instead of DataDir, reaches the cluster from a machine
	// that need not be a server: the binary is handed to the servers and
	// the operator rolls it.
	Kubeconfig string
	// Binary is the steadyplane binary to move to.
	Binary string
	// Rollback moves back to the binary before the current one.
	Rollback bool
	// Wait bounds the wait for the move; 0 asks for it and returns.
	Wait time.Duration
	// Out receives progress lines.
	Out io.Writer
}

// Upgrade moves the server of o.DataDir to another binary: it checks the
// binary and the version skew against the cluster's Nodes before anything
// changes, installs it by content, asks for the move (State Pending), and
// waits for the server's up to hand over and come up on it, or to fall back.
// In a cluster, or once the operator rolls releases, it sets spec.release
// for the operator to roll instead (upgradeCluster); with o.Kubeconfig it
// does so from anywhere, handing the binary to the servers (upgradeFrom).
func Upgrade(ctx context.Context, o UpgradeOptions) error {
	out := o.Out
	if out == nil {
		out = io.Discard
	}
	if o.Kubeconfig != "" {
		return upgradeFrom(ctx, o.Kubeconfig, o, out)
	}
	dir, err := filepath.Abs(o.DataDir)
	if err == nil {
		dir, err = filepath.EvalSymlinks(dir)
	}
	if err != nil {
		return fmt.Errorf("data directory %s: %w", o.DataDir, err)
	}
	st, err := ReadState(dir)
	if err != nil {
		return err
	}
	if st == nil {
		return fmt.Errorf("%s has no release yet: start steadyplane up on it (as root, with runc) first", dir)
	}
	if st.Phase == Starting && st.Target != nil {
		if Alive(st.StartedBy) {
			return fmt.Errorf("a move to release %s is under way (up %d starts it); wait for it to end", st.Target.Release, st.StartedBy.Pid)
		}
		fmt.Fprintf(out, "the move to release %s was left unfinished (its up is gone); this move replaces it\n", st.Target.Release)
	}
	var target Binary
	switch {
	case o.Rollback && st.Previous == nil:
		return fmt.Errorf("%s has no release before %s to go back to", dir, st.Current.Release)
	case o.Rollback:
		target = *st.Previous
	case o.Binary == "":
		return errors.New("--binary names the steadyplane binary to move to (or --rollback)")
	default:
		target.Path = o.Binary
	}
	info, versions, err := describeTarget(ctx, target.Path, out)
	if err != nil {
		return err
	}
	nodes, err := checkCluster(ctx, filepath.Join(dir, "admin.kubeconfig"), Move{Target: versions, Rollback: o.Rollback}, out)
	if err != nil {
		// Going back is what a server whose API does not answer may
		// need most: it goes without the check.
		if !o.Rollback || !errors.Is(err, errClusterUnread) {
			return err
		}
		fmt.Fprintf(out, "WARNING: %v; going back without checking the version skew\n", err)
	}
	if !o.Rollback {
		installed, err := binary.Install(o.Binary, filepath.Join(dir, "bin"))
		if err != nil {
			return fmt.Errorf("installing %s: %w", o.Binary, err)
		}
		target = Binary{Path: installed, Release: info.Release}
	}
	byOperator, err := releaseSet(ctx, filepath.Join(dir, "admin.kubeconfig"))
	switch {
	case err != nil && !o.Rollback:
		return fmt.Errorf("reading the KubeAPIServer, to know whether its operator rolls this server's releases: %w", err)
	case err != nil:
		fmt.Fprintf(out, "WARNING: reading the KubeAPIServer: %v; going back on this server alone (an operator that rolls releases may move it again)\n", err)
	}
	if len(nodes) > 1 || byOperator {
		// A cluster moves through its operator, one node at a time, and
		// so does one server once the operator rolls its releases.
		return upgradeCluster(ctx, filepath.Join(dir, "admin.kubeconfig"), target, o.Wait, out)
	}
	if target.Path == st.Current.Path {
		fmt.Fprintf(out, "%s runs release %s already\n", dir, st.Current.Release)
		return nil
	}
	// The API server's revisions before the move: one made after it that
	// falls back is the move's.
	revision := latestRevision(ctx, filepath.Join(dir, "admin.kubeconfig"))
	next := st.to(Pending, Process{}, "", "")
	next.Target = &target
	if err := WriteState(dir, next); err != nil {
		return err
	}
	if !upRuns(dir) {
		fmt.Fprintf(out, "no up runs on %s: the next up starts release %s\n", dir, target.Release)
		return nil
	}
	fmt.Fprintf(out, "asked the up of %s to move from release %s to %s\n", dir, st.Current.Release, target.Release)
	if o.Wait == 0 {
		return nil
	}
	deadline := time.Now().Add(o.Wait)
	if err := waitMove(ctx, dir, target, time.Until(deadline), out); err != nil {
		return err
	}
	return waitAPIServer(ctx, filepath.Join(dir, "admin.kubeconfig"), target.Release, revision, time.Until(deadline), out)
}

// RolledOut says the API server's latest revision runs on every node and
// no rollout is in progress.
func RolledOut(k *v1alpha1.KubeAPIServer) bool {
	if k.Status.LatestAvailableRevision == 0 || len(k.Status.NodeStatuses) == 0 {
		return false
	}
	for _, n := range k.Status.NodeStatuses {
		if n.CurrentRevision != k.Status.LatestAvailableRevision {
			return false
		}
	}
	c := meta.FindStatusCondition(k.Status.Conditions, v1alpha1.ConditionProgressing)
	return c != nil && c.Status == metav1.ConditionFalse
}

// waitAPIServer waits until the server's API server runs release (its
// /version says so: the operator rolls a revision onto the new binary
// once up runs it) and the rollout is over. Refusals are waited out: the
// API server restarts on the way.
func waitAPIServer(ctx context.Context, kubeconfig, release string, before int32, wait time.Duration, out io.Writer) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	cfg.Timeout = 5 * time.Second
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	api := v1alpha1.Client{Dynamic: dynamic.NewForConfigOrDie(cfg)}
	suffix := buildinfo.Suffix + "-" + release
	var seen string
	for deadline := time.Now().Add(wait); time.Now().Before(deadline); {
		k, kerr := api.Get(ctx, v1alpha1.Name)
		if kerr == nil && k.Status.LatestAvailableRevision > before {
			// A revision made since: one that fell back says why.
			if c := meta.FindStatusCondition(k.Status.Conditions, v1alpha1.ConditionDegraded); c != nil && c.Status == metav1.ConditionTrue {
				return fmt.Errorf("the API server's revision %d for release %s fell back (%s): %s", k.Status.LatestAvailableRevision, release, c.Reason, c.Message)
			}
		}
		if v, err := client.Discovery().ServerVersion(); err == nil && strings.HasSuffix(v.GitVersion, suffix) {
			// A new binary makes a new revision (the node's templates
			// name it): the same release's suffix does not tell.
			if kerr == nil && k.Status.LatestAvailableRevision > before && RolledOut(k) {
				fmt.Fprintf(out, "API server on release %s (revision %d)\n", release, k.Status.LatestAvailableRevision)
				return nil
			}
		} else if err == nil && v.GitVersion != seen {
			seen = v.GitVersion
			fmt.Fprintf(out, "API server still on %s; the operator rolls a revision onto the new binary\n", seen)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
	return fmt.Errorf("the API server did not move to release %s within the wait (kubectl get kubeapiserver cluster says why)", release)
}

// DescribeBinary is what the steadyplane binary at path says of itself
// ("<path> version -o json"); an error when it is no binary of a release.
func DescribeBinary(ctx context.Context, path string) (buildinfo.Info, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	b, err := exec.CommandContext(ctx, path, "version", "-o", "json").Output()
	if err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return buildinfo.Info{}, fmt.Errorf("%s version: %v: %s", path, err, exit.Stderr)
		}
		return buildinfo.Info{}, fmt.Errorf("%s version: %w", path, err)
	}
	var info buildinfo.Info
	if err := json.Unmarshal(b, &info); err != nil || info.Release == "" {
		return buildinfo.Info{}, fmt.Errorf("%s is no steadyplane binary of a release: its version says %q", path, b)
	}
	return info, nil
}

// describeTarget is what the binary at path says of itself, and the
// versions the skew policy compares, printed as the move's target.
func describeTarget(ctx context.Context, path string, out io.Writer) (buildinfo.Info, Versions, error) {
	info, err := DescribeBinary(ctx, path)
	if err != nil {
		return info, Versions{}, err
	}
	versions, err := versionsOf(info)
	if err != nil {
		return info, Versions{}, fmt.Errorf("%s: %w", path, err)
	}
	fmt.Fprintf(out, "target: release %s (Kubernetes %s, commit %s)\n", info.Release, info.Kubernetes, info.Commit)
	return info, versions, nil
}

// versionsOf is what a binary's version says, parsed.
func versionsOf(info buildinfo.Info) (Versions, error) {
	r, err := buildinfo.ParseRelease(info.Release)
	if err != nil {
		return Versions{}, err
	}
	k, err := utilversion.ParseSemantic(info.Kubernetes)
	if err != nil {
		return Versions{}, fmt.Errorf("Kubernetes version %q: %w", info.Kubernetes, err)
	}
	return Versions{Release: r, Kubernetes: k}, nil
}

// errClusterUnread says the cluster's Nodes could not be read.
var errClusterUnread = errors.New("the cluster does not answer")

// checkCluster reads the cluster's Nodes (servers are those with API
// server templates) and refuses a move the skew policy forbids.
func checkCluster(ctx context.Context, kubeconfig string, m Move, out io.Writer) ([]Node, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("reading the cluster to check version skew: %w", err)
	}
	cfg.Timeout = 10 * time.Second
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("%w: reading the cluster's Nodes to check version skew (is up running?): %v", errClusterUnread, err)
	}
	var list []Node
	for _, n := range nodes.Items {
		v, err := ParseNodeVersion(n.Status.NodeInfo.KubeletVersion)
		if err != nil {
			return nil, fmt.Errorf("node %s: %w", n.Name, err)
		}
		_, terr := client.CoreV1().ConfigMaps(v1alpha1.Namespace).Get(ctx, operator.TemplatesName(n.Name), metav1.GetOptions{})
		list = append(list, Node{Name: n.Name, Server: terr == nil, Versions: v})
		fmt.Fprintf(out, "node %s: %s\n", n.Name, v)
	}
	if err := CheckUpgrade(list, m); err != nil {
		return nil, fmt.Errorf("refused, nothing changed:\n%w", err)
	}
	return list, nil
}

// upRuns says an up holds dir's lock.
func upRuns(dir string) bool {
	f, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_RDWR, 0)
	if err != nil {
		return false
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return true
	}
	_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	return false
}

// waitMove follows the move to target until it is done or failed.
func waitMove(ctx context.Context, dir string, target Binary, wait time.Duration, out io.Writer) error {
	deadline := time.Now().Add(wait)
	var last Phase = Pending
	settling := false
	for time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
		st, err := ReadState(dir)
		if err != nil || st == nil {
			continue
		}
		switch {
		case st.Current.Path == target.Path && (st.Phase == Done || st.Phase == ""):
			fmt.Fprintf(out, "%s runs release %s\n", dir, target.Release)
			return nil
		case st.Phase == Failed && st.Target != nil && st.Target.Path == target.Path && st.Reason == ReasonUnsupported:
			return fmt.Errorf("release %s not started: %s", target.Release, st.Message)
		case st.Phase == Failed && st.Target != nil && st.Target.Path == target.Path:
			return fmt.Errorf("release %s failed (%s): %s; %s runs release %s again", target.Release, st.Reason, st.Message, dir, st.Current.Release)
		case st.Phase == Starting && !Alive(st.StartedBy):
			return fmt.Errorf("release %s failed: its up (%d) exited before it was up; the next start of up (a service manager's, or by hand) runs release %s again and records why", target.Release, st.StartedBy.Pid, st.Current.Release)
		case st.Phase != last:
			last = st.Phase
			if st.Phase == Starting {
				fmt.Fprintf(out, "up %d hands over: the control plane restarts on release %s, the workloads keep running\n", st.StartedBy.Pid, target.Release)
			}
		}
		if st.Phase == Starting && st.Settling && !settling {
			settling = true
			fmt.Fprintf(out, "release %s is up; it settles for %v (a component that restarts %d times in it sends the server back)\n", target.Release, SettleWindow, CrashLoopRestarts)
		}
	}
	return fmt.Errorf("release %s not up within %v (steadyplane upgrade again waits on)", target.Release, wait)
}

// Alive says process p runs: its pid, started when p was (a pid reused
// after a reboot is another process), and not ended (an ended one its
// parent has not reaped yet is not alive).
func Alive(p Process) bool {
	ticks, ok := procfs.StartTime(p.Pid)
	return p.Pid > 0 && ok && ticks == p.Ticks && procfs.Running(p.Pid)
}

// Me is this process, as State names it.
func Me() Process {
	ticks, _ := procfs.StartTime(os.Getpid())
	return Process{Pid: os.Getpid(), Ticks: ticks}
}

// latestRevision is the API server's latest revision, -1 when it cannot
// be read.
func latestRevision(ctx context.Context, kubeconfig string) int32 {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return -1
	}
	cfg.Timeout = 5 * time.Second
	k, err := v1alpha1.Client{Dynamic: dynamic.NewForConfigOrDie(cfg)}.Get(ctx, v1alpha1.Name)
	if err != nil {
		return -1
	}
	return k.Status.LatestAvailableRevision
}
