package join

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// masterLeasesPrefix is where the API servers' endpoint leases are kept
// in etcd (kube-apiserver's lease endpoint reconciler: /registry +
// /masterleases/<ip>).
const masterLeasesPrefix = "/registry/masterleases/"

// RemoveNode takes the server or worker name out of the cluster that the
// server in dataDir belongs to: its etcd member (when it is a server; only
// if the members left keep a quorum), its API server's endpoint, and its
// Node. The host itself is not touched: stop "up" there first, and clean
// its data directory before it joins again.
func RemoveNode(ctx context.Context, dataDir, name string, progressf func(string, ...any)) error {
	st, err := LoadState(dataDir)
	if err != nil {
		return err
	}
	client, err := AdminClient(dataDir)
	if err != nil {
		return err
	}
	node, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("no Node %s in the cluster", name)
	}
	if err != nil {
		return fmt.Errorf("reading Node %s: %w", name, err)
	}
	ips := internalIPs(node)
	cli, err := dataDirEtcdClient(dataDir, st)
	if err != nil {
		return err
	}
	defer cli.Close()
	members, err := ListMembers(ctx, cli)
	if err != nil {
		return fmt.Errorf("%w (with no quorum, nothing can be removed: see up --cluster-reset)", err)
	}
	target := MemberOf(members, name, ips)
	if target != 0 {
		healthy := MemberHealth(ctx, cli, members, 2*time.Second)
		if err := CanRemove(members, healthy, target); err != nil {
			return fmt.Errorf("not removing %s's etcd member: %w", name, err)
		}
		rctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		_, err := cli.MemberRemove(rctx, target)
		cancel()
		if err != nil {
			return fmt.Errorf("removing %s's etcd member: %w", name, err)
		}
		progressf("removed %s's etcd member %x (%d members left)", name, target, len(members)-1)
	} else {
		progressf("%s has no etcd member (a worker; for a server whose member has another name and address, see the members with etcdctl member list)", name)
	}
	for _, ip := range ips {
		if resp, err := cli.Delete(ctx, masterLeasesPrefix+ip); err != nil {
			return fmt.Errorf("removing %s's API server endpoint: %w", name, err)
		} else if resp.Deleted > 0 {
			progressf("removed %s's API server (%s) from the kubernetes Endpoints", name, ip)
		}
	}
	if err := client.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting Node %s: %w", name, err)
	}
	progressf("deleted Node %s", name)
	if target != 0 {
		progressf("%s's data directory cannot start again (its etcd member is gone): there, stop up and run steadyplane cleanup --remove-data, then join it again with up --server and the token", name)
	}
	return nil
}
