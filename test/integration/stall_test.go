package integration

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/util/cert"

	"github.com/steadyplane/steadyplane/internal/testenv"
	"github.com/steadyplane/steadyplane/pkg/altsvc/altsvcclient"
	"github.com/steadyplane/steadyplane/pkg/controlplane"
)

// TestWritesOnAStalledServer pauses (SIGSTOP) the etcd member, then the
// API server, of the server two clients use, with a write of each in
// flight there. Neither process answers anything, and the API server holds
// what it was sent. The conditional update must be established on another
// server and the create by name must end with an error that says its
// outcome is unknown (it is not sent again), both within a second or so
// instead of the pause's length; the clients then use another server.
//
// etcd's leader is moved off the paused member first. A write that a
// follower forwarded to a leader that then stops is dropped by etcd, and
// answered "request timed out" only after etcd's request timeout (5 s and
// more): that case is etcd's, measured by bench/robustness, and left.
func TestWritesOnAStalledServer(t *testing.T) {
	ctx, c := startHACluster(t, 3, 4*time.Minute)
	const ns = "stall"
	admin := kubernetes.NewForConfigOrDie(c.AdminConfig(1))
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Well above what the check needs (0.3 s + 0.5 s), well below a pause
	// that is never ended, with room for a 2-core machine.
	const bound = 3 * time.Second
	// client is a client of its own, configured with server 0, connected
	// to it and using it.
	client := func(t *testing.T) (*altsvcclient.Pool, typedcorev1.ConfigMapInterface) {
		cfg := c.AdminConfig(0)
		cfg.QPS = -1
		pool, err := altsvcclient.Enable(cfg, altsvcclient.Options{Hosts: []string{c.Host(0), c.Host(1), c.Host(2)}})
		if err != nil {
			t.Fatal(err)
		}
		cms := kubernetes.NewForConfigOrDie(cfg).CoreV1().ConfigMaps(ns)
		if _, err := cms.List(ctx, metav1.ListOptions{}); err != nil {
			t.Fatal(err)
		}
		if pool.Current() != c.Host(0) {
			t.Fatalf("the client uses %s, want server 0 (%s)", pool.Current(), c.Host(0))
		}
		return pool, cms
	}
	for round, paused := range []*controlplane.Process{c.Etcd[0], c.APIServers[0]} {
		t.Run(paused.Name, func(t *testing.T) {
			cm, err := admin.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cas-%d", round)}, Data: map[string]string{"v": "0"}}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			updater, updates := client(t)
			creator, creates := client(t)
			if paused == c.Etcd[0] {
				moveEtcdLeaderOff(ctx, t, c, 0)
			}

			if err := paused.Signal(syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			resumed := false
			resume := func() {
				if !resumed {
					resumed = true
					if err := paused.Signal(syscall.SIGCONT); err != nil {
						t.Error(err)
					}
				}
			}
			defer resume()

			cm.Data["v"] = "1"
			start := time.Now()
			rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			updated, err := updates.Update(rctx, cm, metav1.UpdateOptions{})
			cancel()
			took := time.Since(start)
			t.Logf("conditional update with %s paused: %v after %v", paused.Name, err, took.Round(time.Millisecond))
			if err != nil || updated.Data["v"] != "1" || took > bound {
				t.Errorf("conditional update: %v after %v; want it established on another server within %v", err, took, bound)
			}
			if updater.Current() == c.Host(0) {
				t.Error("the updating client still uses server 0")
			}

			start = time.Now()
			rctx, cancel = context.WithTimeout(ctx, 30*time.Second)
			_, err = creates.Create(rctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("create-%d", round)}}, metav1.CreateOptions{})
			cancel()
			took = time.Since(start)
			t.Logf("create by name with %s paused: %v after %v", paused.Name, err, took.Round(time.Millisecond))
			if !altsvcclient.IsOutcomeUnknown(err) || took > bound {
				t.Errorf("create by name: %v after %v; want an outcome-unknown error within %v", err, took, bound)
			}
			if creator.Current() == c.Host(0) {
				t.Error("the creating client still uses server 0")
			}
			resume()
			if err := c.WaitReady(ctx, 0); err != nil {
				t.Fatal(err)
			}
			// The first copy of the update, held by the paused process,
			// has reached etcd by now or never will: it must not have
			// taken effect after the second.
			if err == nil {
				time.Sleep(2 * time.Second)
				now, err := admin.CoreV1().ConfigMaps(ns).Get(ctx, cm.Name, metav1.GetOptions{})
				if err != nil || now.ResourceVersion != updated.ResourceVersion || now.Data["v"] != "1" {
					t.Errorf("after the pause the object is %v (%v); want it as the update left it (resourceVersion %s): the update took effect twice", now, err, updated.ResourceVersion)
				}
			}
		})
	}
}

// moveEtcdLeaderOff makes another member etcd's leader when host i's
// member is.
func moveEtcdLeaderOff(ctx context.Context, t *testing.T, c *testenv.HACluster, i int) {
	t.Helper()
	pair, err := tls.X509KeyPair(c.PKI.APIServerEtcdClient.CertPEM, c.PKI.APIServerEtcdClient.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	roots, err := cert.NewPoolFromBytes(c.PKI.EtcdCA.CertPEM)
	if err != nil {
		t.Fatal(err)
	}
	endpoint := "https://" + net.JoinHostPort(c.Net.Hosts[i].IP.String(), "2379")
	cl, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		TLS: &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	st, err := cl.Status(rctx, endpoint)
	if err != nil {
		t.Fatal(err)
	}
	if st.Leader != st.Header.MemberId {
		return
	}
	members, err := cl.MemberList(rctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range members.Members {
		if m.ID != st.Header.MemberId {
			if _, err := cl.MoveLeader(rctx, m.ID); err != nil {
				t.Fatal(err)
			}
			t.Logf("etcd's leadership moved from %s to %s", c.Etcd[i].Name, m.Name)
			return
		}
	}
}
