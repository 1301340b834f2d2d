package release

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/steadyplane/steadyplane/pkg/binary"
	"github.com/steadyplane/steadyplane/pkg/fallback/apis/v1alpha1"
)

// handInTimeout bounds the hand-in of a binary to one server (a quarter
// of a gigabyte through the API server).
const handInTimeout = 5 * time.Minute

// upgradeFrom rolls the binary o.Binary over the cluster kubeconfig
// reaches, from a machine that need not be a server: after the same
// checks as on a server, it hands the binary to every server through the
// API server's node proxy (PUT /releases/<digest> on their node API), from
// where the other nodes fetch it, and lets the operator roll it, on one
// node as on many.
func upgradeFrom(ctx context.Context, kubeconfig string, o UpgradeOptions, out io.Writer) error {
	if o.Rollback {
		return errors.New("--rollback goes back to the binary a server ran before, which that server keeps: run it there (--data-dir), or name the release to go to with --binary")
	}
	if o.Binary == "" {
		return errors.New("--binary names the steadyplane binary to move to")
	}
	info, versions, err := describeTarget(ctx, o.Binary, out)
	if err != nil {
		return err
	}
	nodes, err := checkCluster(ctx, kubeconfig, Move{Target: versions}, out)
	if err != nil {
		return err
	}
	digest, err := binary.Digest(o.Binary)
	if err != nil {
		return err
	}
	if err := handIn(ctx, kubeconfig, nodes, o.Binary, digest, out); err != nil {
		return err
	}
	return upgradeCluster(ctx, kubeconfig, Binary{Path: o.Binary, Release: info.Release}, o.Wait, out)
}

// handIn puts the binary at path on every server of nodes through the API
// server's node proxy; one that takes it is enough for the rollout.
func handIn(ctx context.Context, kubeconfig string, nodes []Node, path, digest string, out io.Writer) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	var errs []error
	took := 0
	for _, n := range nodes {
		if !n.Server {
			continue
		}
		if err := handInTo(ctx, client, n.Name, path, digest); err != nil {
			errs = append(errs, fmt.Errorf("server %s: %w", n.Name, err))
			fmt.Fprintf(out, "server %s did not take the binary: %v\n", n.Name, err)
			continue
		}
		took++
		fmt.Fprintf(out, "server %s has the binary (%s)\n", n.Name, digest)
	}
	switch {
	case took == 0 && len(errs) == 0:
		return fmt.Errorf("no Node is a server (one with templates in %s, which the kubeconfig must read): nothing changed", v1alpha1.Namespace)
	case took == 0:
		return fmt.Errorf("no server took the binary, nothing changed: %w", errors.Join(errs...))
	}
	return nil
}

// handInTo sends the binary to one node's API through the node proxy.
func handInTo(ctx context.Context, client kubernetes.Interface, node, path, digest string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	ctx, cancel := context.WithTimeout(ctx, handInTimeout)
	defer cancel()
	return client.CoreV1().RESTClient().Put().AbsPath("/api/v1/nodes", node, "proxy", "releases", digest).
		SetHeader("Content-Type", "application/octet-stream").Body(f).Do(ctx).Error()
}

// releaseSet says the cluster's KubeAPIServer names a release: once the
// operator rolls releases, a move of one server alone would be undone by
// it, so every move goes through it. An error says it could not tell.
func releaseSet(ctx context.Context, kubeconfig string) (bool, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return false, err
	}
	cfg.Timeout = 10 * time.Second
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return false, err
	}
	k, err := v1alpha1.Client{Dynamic: dyn}.Get(ctx, v1alpha1.Name)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return k.Spec.Release != nil, nil
}
