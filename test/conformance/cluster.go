package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/steadyplane/steadyplane/internal/testenv"
	"github.com/steadyplane/steadyplane/pkg/clientconfig"
	"github.com/steadyplane/steadyplane/pkg/procfs"
)

// pairPods is the pods' range of the server and worker run; each node has
// a /24 of it.
const pairPods = "10.220.0.0/16"

// cluster is the cluster a run tests: the admin kubeconfig the suite uses
// and how to stop it and remove what it left.
type cluster struct {
	kubeconfig string
	stop       func()
}

// startSingle starts one "steadyplane up" on loopback, in dataDir: the
// cluster every focused run uses.
func startSingle(ctx context.Context, steadyplane, dataDir string) (cluster, error) {
	if err := freshDataDir(ctx, steadyplane, dataDir); err != nil {
		return cluster{}, err
	}
	ports, err := testenv.FreePorts(testenv.UpPorts)
	if err != nil {
		return cluster{}, err
	}
	upArgs, cleanup := testenv.UpArgs(dataDir, ports, 245, conformanceBridge, "--service-cidr", serviceCIDR)
	fmt.Println("starting steadyplane up:", strings.Join(upArgs, " "))
	up, err := testenv.StartUp(ctx, steadyplane, upArgs)
	if err != nil {
		cleanup()
		return cluster{}, err
	}
	fmt.Printf("up in %s\n", up.AllReady.Round(time.Second))
	return cluster{
		kubeconfig: filepath.Join(dataDir, "admin.kubeconfig"),
		stop:       func() { up.Stop(); cleanup() },
	}, nil
}

// startPair starts a server ("steadyplane up") and a worker ("steadyplane
// node", joined with the server's node token) on the two hosts of nw, in
// dir, and waits for both Nodes to be Ready: the suite has tests that need
// two schedulable nodes. Both pull the suite's images from registry (on
// nw's gateway, plain HTTP) through a registries file that names it as its
// own http:// mirror. Each host drops what it would send to the service
// range unrewritten.
func startPair(ctx context.Context, steadyplane string, nw *testenv.Network, dir, registry, logs string) (cluster, error) {
	if err := cleanStaleCluster(dir); err != nil {
		return cluster{}, err
	}
	if err := testenv.UnusedRange(pairPods); err != nil {
		return cluster{}, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return cluster{}, err
	}
	hosts, err := testenv.ClusterLayout(nw, dir, 1, 1, pairPods)
	if err != nil {
		return cluster{}, err
	}
	server, worker := hosts[0], hosts[1]
	registries := registriesFile(registry)
	if err := os.WriteFile(filepath.Join(server.DataDir(), "registries.yaml"), registries, 0o600); err != nil {
		return cluster{}, err
	}
	workerRegistries := filepath.Join(worker.Dir, "registries.yaml")
	if err := os.WriteFile(workerRegistries, registries, 0o600); err != nil {
		return cluster{}, err
	}
	server.Args = append(server.Args, "--service-cidr", serviceCIDR)
	worker.Args = append(worker.Args, "--registries-config", workerRegistries)

	var stops []func()
	c := cluster{stop: func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}}
	fail := func(err error) (cluster, error) {
		c.stop()
		return cluster{}, err
	}
	for i := range hosts {
		undrop, err := nw.DropServiceRange(i, serviceCIDR)
		if err != nil {
			return fail(err)
		}
		stops = append(stops, undrop)
	}

	began := time.Now()
	cmd := server.Command(nw, steadyplane)
	fmt.Printf("starting the server on %s: steadyplane %s\n", server.IP, strings.Join(server.Args, " "))
	up, err := testenv.StartUp(ctx, cmd.Args[0], cmd.Args[1:])
	if err != nil {
		testenv.CleanHost(nw, server, steadyplane)
		return fail(fmt.Errorf("the server: %w (its logs: %s)", err, filepath.Join(server.DataDir(), "logs")))
	}
	stops = append(stops, func() { testenv.StopProcess(up.Cmd().Process, time.Minute); testenv.CleanHost(nw, server, steadyplane) })
	fmt.Printf("server up in %s\n", up.AllReady.Round(time.Second))

	if err := worker.TakeToken(server); err != nil {
		return fail(err)
	}
	workerLog, err := os.Create(filepath.Join(logs, "worker.log"))
	if err != nil {
		return fail(err)
	}
	node := worker.Command(nw, steadyplane)
	node.Stdout, node.Stderr = workerLog, workerLog
	fmt.Printf("starting the worker on %s: steadyplane %s\n", worker.IP, strings.Join(worker.Args, " "))
	if err := node.Start(); err != nil {
		workerLog.Close()
		return fail(err)
	}
	stops = append(stops, func() {
		testenv.StopProcess(node.Process, 30*time.Second)
		workerLog.Close()
		testenv.CleanHost(nw, worker, steadyplane)
	})

	c.kubeconfig = filepath.Join(server.DataDir(), "admin.kubeconfig")
	cfg, _, err := clientconfig.Load(c.kubeconfig, clientconfig.Options{})
	if err != nil {
		return fail(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fail(err)
	}
	if err := testenv.WaitReadyNodes(ctx, cs, 2, 5*time.Minute); err != nil {
		return fail(fmt.Errorf("%w (the worker's log: %s)", err, workerLog.Name()))
	}
	fmt.Printf("server and worker Ready in %s\n", time.Since(began).Round(time.Second))
	return c, nil
}

// registriesFile is a node's registries file that reaches registry
// (host:port) over plain HTTP: its own mirror at an http:// endpoint.
func registriesFile(registry string) []byte {
	return fmt.Appendf(nil, "mirrors:\n  %q:\n    endpoint:\n      - %q\n", registry, "http://"+registry)
}

// cleanStaleCluster removes the server and worker of an earlier run in
// dir that was killed: its processes (those whose arguments, or an
// ancestor's, name a path under dir; never this process or its own
// ancestors), once they are gone its containers and mounts, then the
// directory. Its network namespaces went with its runner
// (testenv.NewNetwork removes those of processes that are gone).
func cleanStaleCluster(dir string) error {
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	fmt.Println("removing the cluster of an earlier run in", dir)
	mine := map[int]bool{}
	for pid := os.Getpid(); pid > 1; pid = procfs.ParentPid(pid) {
		mine[pid] = true
	}
	var killed []int
	for _, p := range testenv.ClusterProcesses(dir + string(filepath.Separator)) {
		if !mine[p.Pid] && syscall.Kill(p.Pid, syscall.SIGKILL) == nil {
			killed = append(killed, p.Pid)
		}
	}
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		killed = slices.DeleteFunc(killed, func(pid int) bool { return syscall.Kill(pid, 0) != nil })
		if len(killed) == 0 {
			break
		}
	}
	hostDirs, _ := filepath.Glob(filepath.Join(dir, "host*"))
	for _, h := range hostDirs {
		testenv.CleanNode(filepath.Join(h, "node"))
		testenv.CleanNode(filepath.Join(h, ".steadyplane", "node"))
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("a fresh cluster directory: %w (processes still there: %v; see findmnt for mounts left under %s)", err, killed, dir)
	}
	return nil
}

// freshDataDir removes the data directory of an earlier run. A run that was
// killed (a CI job cancelled, a machine's session ended) leaves its pods'
// processes, namespace and root-filesystem mounts behind, which a plain
// removal cannot pass: "steadyplane cleanup", as a user would run it after a
// kill -9 of up, stops and unmounts them first.
func freshDataDir(ctx context.Context, steadyplane, dataDir string) error {
	if _, err := os.Stat(dataDir); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	cmd := exec.CommandContext(ctx, steadyplane, "cleanup", "--data-dir", dataDir, "--cni-bridge", conformanceBridge, "--remove-data")
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	fmt.Println("cleaning up after an earlier run:", strings.Join(cmd.Args, " "))
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("a fresh data directory: steadyplane cleanup: %w (see findmnt for mounts left under %s)", err, dataDir)
	}
	return nil
}
