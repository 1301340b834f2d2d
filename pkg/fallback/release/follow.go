package release

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"

	"github.com/steadyplane/steadyplane/pkg/binary"
	"github.com/steadyplane/steadyplane/pkg/buildinfo"
	"github.com/steadyplane/steadyplane/pkg/fallback/apis/v1alpha1"
	"github.com/steadyplane/steadyplane/pkg/node/kubeletapi"
	"github.com/steadyplane/steadyplane/pkg/rbacutil"
)

// Follower is a node's side of a release rollout (the operator's is
// operator.DecideRelease): it says on its Node which release it runs and
// which one it could not start, and when the operator asks it to move, it
// fetches the binary from a node that has it (the node API's
// /releases/<digest>, authenticated by the node's own certificate, the
// peer's verified with the node API's CA, the content by its digest) and
// asks its up to move (a Pending State), as steadyplane upgrade does on a
// server.
type Follower struct {
	// Client reads and annotates the Node.
	Client kubernetes.Interface
	// NodeName is this node's.
	NodeName string
	// DataDir holds the release State and bin/, the installed binaries.
	DataDir string
	// Peer authenticates this node to other nodes' APIs: the node's
	// credentials (TLSClientConfig's certificate). Their serving
	// certificates are verified with the node API's CA the servers publish
	// (PublishNodeAPICA), read through Client.
	Peer *rest.Config
	// Poll is how often the Node is read.
	Poll time.Duration
	// Progress receives what the follower does.
	Progress func(format string, args ...any)
}

// Run follows the rollout until ctx ends.
func (f *Follower) Run(ctx context.Context) {
	var running string
	var self *Binary
	if b, err := Self(); err == nil {
		self = &b
	}
	failures := 0
	t := time.NewTicker(cmp.Or(f.Poll, 2*time.Second))
	defer t.Stop()
	for ; ; <-t.C {
		if ctx.Err() != nil {
			return
		}
		if running == "" {
			r, err := runningRelease()
			if err != nil {
				f.Progress("release: %v; this node does not follow the cluster's release", err)
				return
			}
			running = r
		}
		node, err := f.Client.CoreV1().Nodes().Get(ctx, f.NodeName, metav1.GetOptions{})
		if err != nil {
			continue
		}
		st, err := ReadState(f.DataDir)
		if err != nil {
			continue
		}
		// The Node says what runs and what last failed, whatever
		// happened to it meanwhile (a failure recorded since, a Node
		// made again).
		settling := self != nil && attempt(st, *self, Me()) && st.Settling
		if say := reportOf(running, settling, st, node.Annotations); len(say) > 0 {
			if err := f.annotate(ctx, say); err != nil {
				f.Progress("release: saying which release this node runs: %v (trying again)", err)
				continue
			}
			if say[v1alpha1.ReleaseRunningAnnotation] != nil {
				f.Progress("release: this node runs %s", running)
			}
			continue
		}
		target := wanted(running, st, node.Annotations)
		if target == "" {
			failures = 0
			continue
		}
		if err := f.prepare(ctx, target); err != nil {
			failures++
			f.Progress("release: preparing the move to %s: %v (attempt %d)", target, err, failures)
			if failures >= fetchAttempts {
				f.failed(ctx, target, ReasonUnavailable, err.Error())
				failures = 0
			}
			continue
		}
		failures = 0
	}
}

// fetchAttempts is how many times a move is prepared before the node
// reports it failed.
const fetchAttempts = 5

// ReasonUnavailable: no node served the release's binary, or it was not
// the release it claimed.
const ReasonUnavailable = "Unavailable"

// runningRelease is this process's release, version@digest.
func runningRelease() (string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", err
	}
	digest, err := binary.Digest(self)
	if err != nil {
		return "", err
	}
	return v1alpha1.Release{Version: buildinfo.Get().Release, Digest: digest}.String(), nil
}

// reportOf is what the Node's annotations (have) lack of what this node
// says: the release it runs, whether it settles on it (a move's first
// start watching its components), and the move it last failed (from the
// State). A settling said before and over is removed (nil).
func reportOf(running string, settling bool, st *State, have map[string]string) map[string]any {
	want := map[string]string{v1alpha1.ReleaseRunningAnnotation: running}
	if settling {
		want[v1alpha1.ReleaseSettlingAnnotation] = running
	}
	if st != nil && st.Phase == Failed && st.Target != nil {
		want[v1alpha1.ReleaseFailedAnnotation] = v1alpha1.Release{Version: st.Target.Release, Digest: st.Target.Digest}.String()
		want[v1alpha1.ReleaseFailedReasonAnnotation] = st.Reason
		want[v1alpha1.ReleaseFailedMessageAnnotation] = st.Message
	}
	say := map[string]any{}
	for k, v := range want {
		if have[k] != v {
			say[k] = v
		}
	}
	if _, ok := have[v1alpha1.ReleaseSettlingAnnotation]; ok && !settling {
		say[v1alpha1.ReleaseSettlingAnnotation] = nil
	}
	return say
}

// wanted is the release the operator asks this node to move to (have are
// its Node's annotations), "" when none: not the one it runs, nor one it
// failed, nor one it moves to already.
func wanted(running string, st *State, have map[string]string) string {
	target := have[v1alpha1.ReleaseTargetAnnotation]
	if target == "" || target == running || target == have[v1alpha1.ReleaseFailedAnnotation] || st == nil {
		return ""
	}
	if st.Target != nil && (v1alpha1.Release{Version: st.Target.Release, Digest: st.Target.Digest}).String() == target && (st.Phase == Pending || st.Phase == Starting) {
		return ""
	}
	return target
}

// failed says on the Node that the move to target failed.
func (f *Follower) failed(ctx context.Context, target, reason, message string) {
	if err := f.annotate(ctx, map[string]any{v1alpha1.ReleaseFailedAnnotation: target, v1alpha1.ReleaseFailedReasonAnnotation: reason,
		v1alpha1.ReleaseFailedMessageAnnotation: message}); err != nil {
		f.Progress("release: saying that %s failed: %v", target, err)
	}
}

func (f *Follower) annotate(ctx context.Context, annotations map[string]any) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": annotations}})
	if err != nil {
		return err
	}
	_, err = f.Client.CoreV1().Nodes().Patch(ctx, f.NodeName, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}

// prepare installs target's binary, from this node's bin/ or fetched
// from another node, and asks up to move to it.
func (f *Follower) prepare(ctx context.Context, target string) error {
	r := v1alpha1.ReleaseOf(target)
	version, digest := r.Version, r.Digest
	if digest == "" {
		return fmt.Errorf("the target %q is no version@digest", target)
	}
	bin := filepath.Join(f.DataDir, "bin")
	path, err := binary.Find(bin, digest)
	if errors.Is(err, fs.ErrNotExist) {
		path, err = f.fetch(ctx, bin, digest)
	}
	if err != nil {
		return err
	}
	info, err := DescribeBinary(ctx, path)
	if err != nil {
		return err
	}
	if info.Release != version {
		return fmt.Errorf("the binary of digest %s is release %s, not %s", digest, info.Release, version)
	}
	st, err := ReadState(f.DataDir)
	if err != nil {
		return err
	}
	if st == nil {
		return errors.New("this node has no release state yet")
	}
	next := st.to(Pending, Process{}, "", "")
	next.Target = &Binary{Path: path, Release: version, Digest: digest}
	if err := WriteState(f.DataDir, next); err != nil {
		return err
	}
	f.Progress("release: moving from %s to %s, as the operator asks", st.Current.Release, version)
	return nil
}

// fetch copies the binary of digest from a node that has it into bin,
// nodes that run it first.
func (f *Follower) fetch(ctx context.Context, bin, digest string) (string, error) {
	nodes, err := f.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", err
	}
	var first, others []corev1.Node
	for _, n := range nodes.Items {
		switch {
		case n.Name == f.NodeName:
		case v1alpha1.ReleaseOf(n.Annotations[v1alpha1.ReleaseRunningAnnotation]).Digest == digest:
			first = append(first, n)
		default:
			others = append(others, n)
		}
	}
	ca, err := f.Client.CoreV1().ConfigMaps(metav1.NamespacePublic).Get(ctx, NodeAPICAConfigMap, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("the node API's CA (%s/%s): %w", metav1.NamespacePublic, NodeAPICAConfigMap, err)
	}
	if ca.Data[nodeAPICAKey] == "" {
		// Never the system's roots: the peers' certificates are the
		// cluster's.
		return "", fmt.Errorf("%s/%s holds no %s", metav1.NamespacePublic, NodeAPICAConfigMap, nodeAPICAKey)
	}
	peer := rest.CopyConfig(f.Peer)
	peer.TLSClientConfig.CAFile, peer.TLSClientConfig.CAData = "", []byte(ca.Data[nodeAPICAKey])
	transport, err := rest.TransportFor(peer)
	if err != nil {
		return "", err
	}
	client := &http.Client{Transport: transport, Timeout: fetchTimeout}
	var errs []error
	for _, n := range append(first, others...) {
		addr := kubeletapi.NodeAddress(&n)
		if addr == "" {
			continue
		}
		path, err := fetchFrom(ctx, client, "https://"+addr+"/releases/"+digest, bin, digest)
		if err == nil {
			f.Progress("release: fetched %s from node %s", digest, n.Name)
			return path, nil
		}
		errs = append(errs, fmt.Errorf("node %s: %w", n.Name, err))
	}
	if len(errs) == 0 {
		return "", errors.New("no other node to fetch it from")
	}
	return "", errors.Join(errs...)
}

// fetchTimeout bounds one fetch of a binary (a quarter of a gigabyte).
const fetchTimeout = 5 * time.Minute

// fetchFrom downloads url into bin as the installed copy of digest, checked
// as it is written: a copy whose content is not digest is never installed.
func fetchFrom(ctx context.Context, client *http.Client, url, bin, digest string) (string, error) {
	if _, err := binary.ParseDigest(digest); err != nil {
		return "", err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return "", fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(msg)))
	}
	path, err := binary.Receive(resp.Body, bin, digest)
	if err != nil {
		return "", fmt.Errorf("from %s: %w", url, err)
	}
	return path, nil
}

// NodeAPICAConfigMap, in kube-public, holds the CA of the nodes' API
// serving certificates (a certificate, no secret), which every node may
// read: nodes verify each other with it when they fetch a release.
const NodeAPICAConfigMap = "steadyplane-node-api-ca"

const nodeAPICAKey = "ca.crt"

// PublishNodeAPICA writes caPEM into NodeAPICAConfigMap, with the Role
// that lets every node read it.
func PublishNodeAPICA(ctx context.Context, client kubernetes.Interface, caPEM []byte) error {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: NodeAPICAConfigMap, Namespace: metav1.NamespacePublic, Labels: rbacutil.ManagedBy},
		Data: map[string]string{nodeAPICAKey: string(caPEM)}}
	api := client.CoreV1().ConfigMaps(metav1.NamespacePublic)
	// Servers starting together write it together.
	err := retry.OnError(retry.DefaultRetry, func(err error) bool { return apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) }, func() error {
		existing, err := api.Get(ctx, cm.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			_, err = api.Create(ctx, cm, metav1.CreateOptions{})
		case err == nil && existing.Data[nodeAPICAKey] != cm.Data[nodeAPICAKey]:
			existing.Data = cm.Data
			_, err = api.Update(ctx, existing, metav1.UpdateOptions{})
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("configmap %s/%s: %w", metav1.NamespacePublic, NodeAPICAConfigMap, err)
	}
	role := "steadyplane:" + NodeAPICAConfigMap
	return rbacutil.Ensure(ctx, client,
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: role, Namespace: metav1.NamespacePublic, Labels: rbacutil.ManagedBy},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get"}, ResourceNames: []string{NodeAPICAConfigMap}}}},
		rbacutil.NamespacedGroupBinding(role, metav1.NamespacePublic, "system:nodes"))
}
