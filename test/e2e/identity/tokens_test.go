// Package identity tests, end to end, who may join a cluster and as
// which node: join tokens that expire and can be revoked for good, and
// node identities the servers decide.
package identity

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/steadyplane/steadyplane/internal/testci"
	"github.com/steadyplane/steadyplane/internal/testenv"
	"github.com/steadyplane/steadyplane/internal/testup"
	"github.com/steadyplane/steadyplane/pkg/join"
)

// tokensClusterCIDR is the pods' range of this package's cluster: no
// route of the machine, nor another test package's cluster, uses it.
const tokensClusterCIDR = "10.215.0.0/16"

// TestJoinTokens runs the README's "Join tokens" walkthrough verbatim on
// a server in a network namespace, then checks, from a second host,
// what a token holder may do: a worker token that asks for the name of
// the server's Node is denied and the Node is left as it was; a token
// past its expiry is refused; a token deleted while up runs is refused,
// its file removed and the token not published again after up restarts;
// a server token's sealed keys go with it.
func TestJoinTokens(t *testing.T) {
	if testing.Short() {
		testci.CannotRun(t, "-short: this test runs steadyplane up in a network namespace")
	}
	bin, nw, hosts := testup.NetworkCluster(t, 1, 1, tokensClusterCIDR)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	s1, other := hosts[0], hosts[1]
	// No cluster DNS: nothing here resolves names, and test/e2e, which
	// runs at once, counts the machine's CoreDNS processes.
	s1.Args = append(s1.Args, "--dns=false")
	t.Cleanup(func() {
		testup.KeepLogs(t, "tokens-"+s1.Name, s1.DataDir())
		testenv.CleanHost(nw, s1, bin)
	})
	start := func() *testup.Up {
		u := testup.StartCmd(t, s1.Name, s1.Command(nw, bin))
		u.WaitUp(t, 5*time.Minute)
		return u
	}
	up := start()
	client := testup.HAClient(t, filepath.Join(s1.DataDir(), join.AdminKubeconfig))
	ca, err := join.ServerCA(s1.DataDir())
	if err != nil {
		t.Fatal(err)
	}

	// The two tokens of the first start, valid 24 hours.
	tokens, err := join.ListTokens(ctx, client, ca)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []join.TokenKind
	for _, tok := range tokens {
		kinds = append(kinds, tok.Kind)
		if left := time.Until(tok.Expires); left < 23*time.Hour || left > 24*time.Hour {
			t.Errorf("token %s (%s) expires in %v, want 24h", tok.Token.ID, tok.Kind, left)
		}
		if tok.Kind == join.ServerToken && !tok.Sealed {
			t.Errorf("server token %s has no join data", tok.Token.ID)
		}
	}
	if !slices.Equal(kinds, []join.TokenKind{join.ServerToken, join.WorkerToken}) {
		t.Fatalf("the first start made tokens %v, want a server's and a worker's", kinds)
	}

	// The README's walkthrough, verbatim, on the server.
	out := runOn(t, ctx, nw, s1, bin, "bash", "-euo", "pipefail", "-c", testup.ReadmeBlock(t, "Join tokens"))
	for _, want := range []string{"ID  ", "server", "worker", "deleted"} {
		if !strings.Contains(out, want) {
			t.Errorf("the walkthrough's output lacks %q", want)
		}
	}
	if after, err := join.ListTokens(ctx, client, ca); err != nil || len(after) != 2 {
		t.Errorf("after the walkthrough: %d tokens (%v), want the first two: the one it made is deleted", len(after), err)
	}

	// A server token made while up runs is sealed by it; deleting the
	// token deletes its sealed keys.
	serverToken := strings.TrimSpace(runOn(t, ctx, nw, s1, bin, bin, "token", "create", "--server", "--ttl", "1h", "--data-dir", s1.DataDir()))
	tok, err := join.ParseToken(serverToken)
	if err != nil {
		t.Fatalf("token create printed %q: %v", serverToken, err)
	}
	if _, err := client.CoreV1().Secrets(metav1.NamespaceSystem).Get(ctx, join.BundleSecretName(tok.ID), metav1.GetOptions{}); err != nil {
		t.Fatalf("the join data of the new server token: %v", err)
	}
	// Its Secret deleted as kubectl would (the token cleaner deletes an
	// expired one the same way): what belongs to it goes too.
	if err := client.CoreV1().Secrets(metav1.NamespaceSystem).Delete(ctx, "bootstrap-token-"+tok.ID, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testup.WaitFor(t, ctx, time.Minute, "the join data and role of a deleted server token gone", func() (bool, string) {
		_, serr := client.CoreV1().Secrets(metav1.NamespaceSystem).Get(ctx, join.BundleSecretName(tok.ID), metav1.GetOptions{})
		_, rerr := client.RbacV1().Roles(metav1.NamespaceSystem).Get(ctx, "steadyplane:join:"+tok.ID, metav1.GetOptions{})
		_, berr := client.RbacV1().RoleBindings(metav1.NamespaceSystem).Get(ctx, "steadyplane:join:"+tok.ID, metav1.GetOptions{})
		return apierrors.IsNotFound(serr) && apierrors.IsNotFound(rerr) && apierrors.IsNotFound(berr), fmt.Sprintf("bundle: %v, role: %v, binding: %v", serr, rerr, berr)
	})

	// A stolen worker token cannot become the server's node.
	nodeTokenPath := filepath.Join(s1.DataDir(), join.NodeTokenFile)
	before, err := client.CoreV1().Nodes().Get(ctx, s1.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out = refusedJoin(t, ctx, nw, other, bin, s1, s1.Name, "--token-file", nodeTokenPath)
	if !strings.Contains(out, "Node "+s1.Name+" exists") {
		t.Errorf("a worker token asking for Node %s: want the servers' denial naming it:\n%s", s1.Name, out)
	}
	after, err := client.CoreV1().Nodes().Get(ctx, s1.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(before.Status.Addresses, after.Status.Addresses) || after.Spec.PodCIDR != before.Spec.PodCIDR {
		t.Errorf("Node %s changed: addresses %v → %v, pods %s → %s", s1.Name, before.Status.Addresses, after.Status.Addresses, before.Spec.PodCIDR, after.Spec.PodCIDR)
	}
	checkDenied(t, ctx, client, s1.Name)

	// A token past its expiry is refused.
	expiring := strings.TrimSpace(runOn(t, ctx, nw, s1, bin, bin, "token", "create", "--ttl", "2s", "--data-dir", s1.DataDir()))
	time.Sleep(3 * time.Second)
	if out := refusedJoin(t, ctx, nw, other, bin, s1, "w-expired", "--token", expiring); !strings.Contains(out, "refused the join token") {
		t.Errorf("an expired token: want it refused:\n%s", out)
	}

	// The worker token deleted, up restarted: the token stays revoked.
	raw, err := os.ReadFile(nodeTokenPath)
	if err != nil {
		t.Fatal(err)
	}
	revoked, err := join.ParseToken(string(raw))
	if err != nil {
		t.Fatal(err)
	}
	runOn(t, ctx, nw, s1, bin, bin, "token", "delete", revoked.ID, "--data-dir", s1.DataDir())
	up.Stop(t)
	up = start()
	t.Cleanup(func() { up.Stop(t) })
	if _, err := os.Stat(nodeTokenPath); !os.IsNotExist(err) {
		t.Errorf("%s after the restart: %v, want it removed", nodeTokenPath, err)
	}
	if !strings.Contains(up.Text(), "was deleted or has expired") {
		t.Error("up does not say that the worker token is gone")
	}
	tokens, err = join.ListTokens(ctx, client, ca)
	if err != nil {
		t.Fatal(err)
	}
	for _, tok := range tokens {
		if tok.Token.ID == revoked.ID {
			t.Errorf("the deleted token %s is published again after a restart", revoked.ID)
		}
	}
	// The 2 s token may still be listed, expired: the token cleaner of a
	// controller manager that has just become leader deletes it.
	live := slices.DeleteFunc(tokens, func(i join.TokenInfo) bool { return !i.Expires.IsZero() && i.Expires.Before(time.Now()) })
	if len(live) != 1 || live[0].Kind != join.ServerToken {
		t.Errorf("live tokens after the restart: %+v, want the server token alone", live)
	}
	if out := refusedJoin(t, ctx, nw, other, bin, s1, "w-revoked", "--token", revoked.String()); !strings.Contains(out, "refused the join token") {
		t.Errorf("a deleted token after a restart: want it refused:\n%s", out)
	}
}

// runOn runs name with args on host h (its network namespace, in its
// directory, with the steadyplane binary first on the PATH) and returns
// its standard output, failing the test if it fails.
func runOn(t *testing.T, ctx context.Context, nw *testenv.Network, h *testenv.ClusterHost, bin, name string, args ...string) string {
	t.Helper()
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmdName, cmdArgs := nw.NSEnter(h.Index, h.HostName, name, args...)
	cmd := exec.CommandContext(cctx, cmdName, cmdArgs...)
	cmd.Dir = h.Dir
	cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(bin)+":"+os.Getenv("PATH"))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	t.Logf("%s %s:\n%s%s", filepath.Base(name), strings.Join(args, " "), out, stderr.String())
	if err != nil {
		t.Fatalf("%s %v: %v", name, args, err)
	}
	return string(out)
}

// refusedJoin runs "steadyplane node --server" on host h as node name
// with the token args, expects it to fail within two minutes, and
// returns what it said.
func refusedJoin(t *testing.T, ctx context.Context, nw *testenv.Network, h *testenv.ClusterHost, bin string, server *testenv.ClusterHost, name string, tokenArgs ...string) string {
	t.Helper()
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	args := append([]string{"node", "--server", "https://" + server.IP + ":6443", "--node-ip", h.IP, "--node-name", name,
		"--root-dir", filepath.Join(h.Dir, "join-"+name), "--runtime", "runc"}, tokenArgs...)
	cmdName, cmdArgs := nw.NSEnter(h.Index, h.HostName, bin, args...)
	out, err := exec.CommandContext(cctx, cmdName, cmdArgs...).CombinedOutput()
	t.Logf("node --node-name %s:\n%s", name, out)
	if err == nil || cctx.Err() != nil {
		t.Errorf("node --node-name %s: %v (context %v), want a refusal", name, err, cctx.Err())
	}
	return string(out)
}

// checkDenied finds a denied request of a join token for the client
// certificate of node, with its Warning Event, and none approved.
func checkDenied(t *testing.T, ctx context.Context, client kubernetes.Interface, node string) {
	t.Helper()
	list, err := client.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var denied string
	for _, c := range list.Items {
		for _, cond := range c.Status.Conditions {
			if cond.Type == certificatesv1.CertificateDenied && c.Spec.SignerName == certificatesv1.KubeAPIServerClientKubeletSignerName && strings.Contains(cond.Message, "Node "+node+" exists") {
				denied = c.Name
			}
			if cond.Type == certificatesv1.CertificateApproved && strings.HasSuffix(cond.Message, "joins the cluster as the new node "+node) {
				t.Errorf("CertificateSigningRequest %s for node %s was approved: %s", c.Name, node, cond.Message)
			}
		}
	}
	if denied == "" {
		t.Fatalf("no denied request of a join token for node %s", node)
	}
	// Events are sent by a broadcaster after the decision: under load the
	// denial is seen before its Event.
	testup.WaitFor(t, ctx, 30*time.Second, "a NodeCertificateDenied Event for "+denied, func() (bool, string) {
		events, err := client.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + denied})
		if err != nil {
			return false, err.Error()
		}
		return slices.ContainsFunc(events.Items, func(e corev1.Event) bool {
			return e.Reason == "NodeCertificateDenied" && e.Type == corev1.EventTypeWarning
		}), fmt.Sprintf("events: %v", events.Items)
	})
}
