// Command renewal measures certificate renewal while steadyplane runs: an
// up with --cert-validity short enough that its certificates renew every
// few tens of seconds, and two client workloads that name the admin
// certificate's files, as a long-running program does: one through
// steadyplane's HA client, one through client-go alone. For each renewal
// it prints how long the new certificate took to reach the API server's
// and etcd's handshakes (from the file's writing), and each workload's
// requests, failures and longest gap between successes; then the totals.
//
//	sudo go run ./bench/renewal [--validity 90s] [--renewals 5]
package main

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/transport"
	certutil "k8s.io/client-go/util/cert"

	"github.com/steadyplane/steadyplane/internal/testenv"
	"github.com/steadyplane/steadyplane/pkg/clientconfig"
)

func main() {
	validity := flag.Duration("validity", 90*time.Second, "up's --cert-validity: a renewal every two thirds of it")
	renewals := flag.Int("renewals", 5, "renewals measured")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, *validity, *renewals); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, validity time.Duration, renewals int) error {
	// As in steadyplane's binary, where every component runs.
	transport.CertCallbackRefreshDuration = 2 * time.Second
	bin, err := testenv.Binary()
	if err != nil {
		return err
	}
	b, err := testenv.NewBenchUp("renewal", 237, "spr", "--cert-validity", validity.String(), "--proxy=false", "--dns=false")
	if err != nil {
		return err
	}
	defer b.Cleanup()
	fmt.Printf("starting up with --cert-validity %v ...\n", validity)
	up, err := testenv.StartUp(ctx, bin, b.Args)
	if err != nil {
		return err
	}
	defer up.Stop()
	kubeconfig, err := testenv.KubeconfigNamingFiles(filepath.Join(b.DataDir, "admin.kubeconfig"), filepath.Join(b.DataDir, "pki", "admin"), filepath.Join(b.DataDir, "bench-renewal.kubeconfig"))
	if err != nil {
		return err
	}
	ha, plain, err := clients(kubeconfig)
	if err != nil {
		return err
	}
	loads := []*load{{name: "HA client"}, {name: "client-go alone"}}
	wctx, stopLoads := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for i, c := range []kubernetes.Interface{ha, plain} {
		wg.Add(1)
		go func() { defer wg.Done(); loads[i].run(wctx, c, "renewal-bench-"+strconv.Itoa(i)) }()
	}
	apiserver := "127.0.0.1:" + strconv.Itoa(b.Ports[0])
	etcd := "127.0.0.1:" + strconv.Itoa(b.Ports[1])
	certFile := filepath.Join(b.DataDir, "pki", "apiserver.crt")
	etcdFile := filepath.Join(b.DataDir, "pki", "etcd-server.crt")
	fmt.Printf("%-8s %-22s %-22s %-36s %s\n", "renewal", "API server reached in", "etcd reached in", loads[0].name, loads[1].name)
	var reachAPI, reachEtcd []time.Duration
	for i := 1; i <= renewals; i++ {
		before, etcdBefore := served(apiserver), serial(etcdFile)
		// The next renewal is due at two thirds of the lifetime.
		deadline := time.Now().Add(validity)
		for served(apiserver) == before && time.Now().Before(deadline) && ctx.Err() == nil {
			time.Sleep(20 * time.Millisecond)
		}
		if ctx.Err() != nil {
			break
		}
		api := sinceWritten(certFile)
		// etcd's file is written a moment after the API server's.
		for serial(etcdFile) == etcdBefore && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		for served(etcd) != serial(etcdFile) && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		et := sinceWritten(etcdFile)
		reachAPI, reachEtcd = append(reachAPI, api), append(reachEtcd, et)
		// A few seconds more: client-go reads the files again and rotates.
		time.Sleep(5 * time.Second)
		fmt.Printf("%-8d %-22v %-22v %-36s %s\n", i, api.Round(time.Millisecond), et.Round(time.Millisecond), loads[0].take(), loads[1].take())
	}
	stopLoads()
	wg.Wait()
	fmt.Println()
	fmt.Printf("renewal reached the API server in %v at worst, etcd in %v\n", maxOf(reachAPI).Round(time.Millisecond), maxOf(reachEtcd).Round(time.Millisecond))
	for _, l := range loads {
		fmt.Printf("%-16s %s\n", l.name+":", l.total())
	}
	return nil
}

// clients are a clientset through steadyplane's HA client and one of
// client-go alone, from kubeconfig.
func clients(kubeconfig string) (ha, plain kubernetes.Interface, err error) {
	cfg, _, err := clientconfig.Load(kubeconfig, clientconfig.Options{})
	if err != nil {
		return nil, nil, err
	}
	cfg.Timeout = 10 * time.Second
	if ha, err = kubernetes.NewForConfig(cfg); err != nil {
		return nil, nil, err
	}
	pcfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, nil, err
	}
	pcfg.Timeout = 10 * time.Second
	plain, err = kubernetes.NewForConfig(rest.CopyConfig(pcfg))
	return ha, plain, err
}

// load is one workload: a read and a compare-and-swap write of its
// ConfigMap, over and over, counted since the last take and in all.
type load struct {
	name string

	mu                sync.Mutex
	ops, failed       int
	gap               time.Duration
	allOps, allFailed int
	allGap            time.Duration
	lastOK            time.Time
	firstErr          string
}

func (l *load) run(ctx context.Context, c kubernetes.Interface, name string) {
	cms := c.CoreV1().ConfigMaps(metav1.NamespaceDefault)
	_, _ = cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	l.mu.Lock()
	l.lastOK = time.Now()
	l.mu.Unlock()
	for n := 0; ctx.Err() == nil; n++ {
		cm, err := cms.Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			cm.Data = map[string]string{"n": strconv.Itoa(n)}
			_, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
			if apierrors.IsConflict(err) {
				err = nil
			}
		}
		if ctx.Err() != nil {
			return
		}
		l.mu.Lock()
		l.ops, l.allOps = l.ops+2, l.allOps+2
		if err != nil {
			l.failed++
			l.allFailed++
			if l.firstErr == "" {
				l.firstErr = err.Error()
			}
		} else {
			now := time.Now()
			l.gap, l.allGap = max(l.gap, now.Sub(l.lastOK)), max(l.allGap, now.Sub(l.lastOK))
			l.lastOK = now
		}
		l.mu.Unlock()
		time.Sleep(10 * time.Millisecond)
	}
}

// take is what happened since the last take.
func (l *load) take() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := fmt.Sprintf("%d requests, %d failed, gap %v", l.ops, l.failed, l.gap.Round(time.Millisecond))
	l.ops, l.failed, l.gap = 0, 0, 0
	return s
}

func (l *load) total() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := fmt.Sprintf("%d requests, %d failed, longest gap between successes %v", l.allOps, l.allFailed, l.allGap.Round(time.Millisecond))
	if l.firstErr != "" {
		s += "; first error: " + l.firstErr
	}
	return s
}

// served is the serial number of the certificate addr serves ("" when it
// cannot be read).
func served(addr string) string {
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: time.Second}, "tcp", addr, &tls.Config{InsecureSkipVerify: true}) // #nosec G402 -- reads the peer's certificate only
	if err != nil {
		return ""
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber.String()
}

// serial is the serial number of the certificate in file.
func serial(file string) string {
	certs, err := certutil.CertsFromFile(file)
	if err != nil {
		return ""
	}
	return certs[0].SerialNumber.String()
}

// sinceWritten is the time since file was written.
func sinceWritten(file string) time.Duration {
	fi, err := os.Stat(file)
	if err != nil {
		return 0
	}
	return time.Since(fi.ModTime())
}

func maxOf(ds []time.Duration) time.Duration {
	var m time.Duration
	for _, d := range ds {
		m = max(m, d)
	}
	return m
}
