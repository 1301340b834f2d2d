// Command snapshot measures etcd snapshots as steadyplane takes and
// restores them (pkg/etcd/snapshot), on a real etcd member in this
// process with --objects keys the size of small Kubernetes objects. Per
// run it prints the save (the snapshot API's stream written, synced,
// checked and recorded) and the file's size; the checks a restore makes
// before it changes anything; the preparation (the copy without etcd's
// trailer, the old cluster's members and raft index trimmed, the
// revision bumped); and the restored member's first start as a new
// cluster of one, until it answers a read of every key.
//
//	go run ./bench/snapshot [--objects 10000] [--value-bytes 1024] [--runs 3]
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/steadyplane/steadyplane/internal/testenv"
	"github.com/steadyplane/steadyplane/pkg/etcd"
	"github.com/steadyplane/steadyplane/pkg/etcd/snapshot"
)

func main() {
	objects := flag.Int("objects", 10000, "Keys written before the snapshot.")
	valueBytes := flag.Int("value-bytes", 1024, "Size of each key's value (a small ConfigMap is about this).")
	runs := flag.Int("runs", 3, "Snapshots saved and restored.")
	flag.Parse()
	if err := run(*objects, *valueBytes, *runs); err != nil {
		fmt.Fprintln(os.Stderr, "snapshot:", err)
		os.Exit(1)
	}
}

func run(objects, valueBytes, runs int) error {
	work, err := os.MkdirTemp("", "steadyplane-bench-snapshot-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	endpoint, stop, err := member(ctx, "first", filepath.Join(work, "etcd"))
	if err != nil {
		return err
	}
	defer stop()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer cli.Close()
	value := strings.Repeat("x", valueBytes)
	began := time.Now()
	for i := range objects {
		if _, err := cli.Put(ctx, fmt.Sprintf("/registry/configmaps/bench/cm-%05d", i), value); err != nil {
			return err
		}
	}
	fmt.Printf("%d keys of %d bytes written in %.1fs\n\n", objects, valueBytes, time.Since(began).Seconds())
	fmt.Println("run  save     size      verify   prepare  first start + read all")
	var saves, restores []time.Duration
	for r := range runs {
		dir := filepath.Join(work, "snapshots")
		t0 := time.Now()
		m, err := snapshot.Save(ctx, clientv3.Config{DialTimeout: 5 * time.Second, Logger: zap.NewNop()}, endpoint, dir,
			snapshot.Meta{Name: fmt.Sprintf("bench-%d", r), Cluster: "sha256:bench", Node: "first", Created: time.Now()})
		if err != nil {
			return err
		}
		save := time.Since(t0)
		t1 := time.Now()
		if _, err := snapshot.Verify(m.DB(dir), "sha256:bench"); err != nil {
			return err
		}
		verify := time.Since(t1)
		target := filepath.Join(work, fmt.Sprintf("restored-%d", r))
		t2 := time.Now()
		staging, err := snapshot.Prepare(m.DB(dir), target)
		if err != nil {
			return err
		}
		if _, err := snapshot.Swap(staging, target, "bench"); err != nil {
			return err
		}
		prepare := time.Since(t2)
		t3 := time.Now()
		restoredEndpoint, stopRestored, err := member(ctx, "restored", target)
		if err != nil {
			return err
		}
		n, err := countKeys(ctx, restoredEndpoint)
		stopRestored()
		if err != nil {
			return err
		}
		if n != objects {
			return fmt.Errorf("the restored member has %d keys, want %d", n, objects)
		}
		start := time.Since(t3)
		saves, restores = append(saves, save), append(restores, verify+prepare+start)
		fmt.Printf("%-4d %-8s %-9s %-8s %-8s %s\n", r+1, ms(save), fmt.Sprintf("%.1f MB", float64(m.Size)/1e6), ms(verify), ms(prepare), ms(start))
	}
	fmt.Printf("\nmedian: save %s, restore (verify + prepare + first start) %s\n", ms(testenv.Median(saves)), ms(testenv.Median(restores)))
	return nil
}

func ms(d time.Duration) string { return fmt.Sprintf("%dms", d.Milliseconds()) }

func countKeys(ctx context.Context, endpoint string) (int, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return 0, err
	}
	defer cli.Close()
	resp, err := cli.Get(ctx, "/registry/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return 0, err
	}
	return int(resp.Count), nil
}

// member runs an etcd member on dataDir (plain HTTP on loopback) as a
// new cluster of one, and returns its client URL and how to stop it.
func member(ctx context.Context, name, dataDir string) (string, func(), error) {
	var ports []int
	for range 2 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return "", nil, err
		}
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
		l.Close()
	}
	client, peer := fmt.Sprintf("http://127.0.0.1:%d", ports[0]), fmt.Sprintf("http://127.0.0.1:%d", ports[1])
	o := etcd.NewOptions()
	o.Name, o.DataDir, o.LogLevel, o.StartTimeout = name, dataDir, "fatal", time.Minute
	o.ListenClientURLs, o.AdvertiseClientURLs = []string{client}, []string{client}
	o.ListenPeerURLs, o.InitialAdvertisePeerURLs = []string{peer}, []string{peer}
	o.InitialCluster = name + "=" + peer
	mctx, cancel := context.WithCancel(ctx)
	ready, done := make(chan struct{}), make(chan error, 1)
	go func() { done <- etcd.Run(mctx, o, func(*embed.Etcd) { close(ready) }) }()
	stop := func() {
		cancel()
		<-done
	}
	select {
	case <-ready:
		return client, stop, nil
	case err := <-done:
		cancel()
		return "", nil, fmt.Errorf("etcd member %s: %v", name, err)
	}
}
