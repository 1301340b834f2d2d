// Command conformance runs the upstream Kubernetes conformance suite
// (k8s.io/kubernetes/test/e2e at the version steadyplane imports) against a
// cluster of its own, offline: it builds e2e.test, the ginkgo CLI and the
// programs of the suite's images from the module cache, makes the images
// (internal/testimage), serves them from a registry of its own named in
// KUBE_TEST_REPO_LIST, and runs the focused tests in parallel, with
// steadyplane's kubectl as the suite's. It prints the passed, failed and
// skipped counts and every failure with its first line, and exits 1 when a
// test failed.
//
// The whole set runs on a server ("steadyplane up") and a worker
// ("steadyplane node") in network namespaces of their own, since some
// tests need two schedulable nodes, and so does -rerun-failed; a focused
// run uses one "up" on loopback (-nodes chooses).
//
// As root, from the module root:
//
//	go run ./test/conformance                       # every [Conformance] test, on a server and a worker
//	go run ./test/conformance -focus '\[sig-node\].*Pods should be submitted and removed'
//	go run ./test/conformance -rerun-failed         # what failed last time
//
// The images are made of Debian's busybox-static (apt-get install
// busybox-static) and programs of this machine with their libraries (curl,
// dig, nc, bash as sh: images.go). One test cannot pass here: the
// read-only busybox container's test expects busybox sh's own words for
// the refused write ("can't create /file"), which bash, the images' sh,
// puts otherwise (docs/pods.md says why bash).
//
// Traffic to the service range that no proxy rule rewrote is dropped
// (OUTPUT and FORWARD) while it runs: it would otherwise leave the machine
// by its default route.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/steadyplane/steadyplane/internal/testenv"
)

// defaultFocus is every conformance test.
const defaultFocus = `\[Conformance\]`

// serviceCIDR is the run's service range; run refuses it when a route
// on the machine already covers part of it.
const serviceCIDR = "10.97.0.0/16"

// conformanceBridge is the pods' bridge of the run's up.
const conformanceBridge = "spk"

func main() {
	work := flag.String("work", filepath.Join(os.TempDir(), "steadyplane-conformance"), "directory for the built programs, the cluster's data and the reports (kept; a run starts with a fresh data directory)")
	focus := flag.String("focus", defaultFocus, "ginkgo --focus: the tests to run")
	skip := flag.String("skip", "", "ginkgo --skip: tests to leave out of those focused")
	procs := flag.Int("procs", 10, "tests run at once (ginkgo --procs; most of a test's time is waiting); [Serial] tests run alone at the end")
	rerun := flag.Bool("rerun-failed", false, "run only the tests that failed in the last run's report (in -work)")
	timeout := flag.Duration("timeout", 2*time.Hour, "the whole suite's timeout (ginkgo --timeout)")
	nodes := flag.Int("nodes", 0, "1: one steadyplane up on loopback; 2: a server (up) and a worker (node) in network namespaces of their own, for the tests that need two schedulable nodes; 0: 2 for the whole set or -rerun-failed, else 1")
	flag.Parse()
	if *rerun {
		last, err := readReport(filepath.Join(*work, "report", "report.json"))
		if err != nil {
			fmt.Fprintln(os.Stderr, "conformance: -rerun-failed:", err)
			os.Exit(2)
		}
		if *focus = last.failedFocus(); *focus == "" {
			fmt.Println("no test failed in the last run")
			return
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *nodes == 0 {
		*nodes = 1
		if *focus == defaultFocus || *rerun {
			*nodes = 2
		}
	}
	if *nodes != 1 && *nodes != 2 {
		fmt.Fprintln(os.Stderr, "conformance: -nodes: 1 or 2 (0: 2 for the whole set or -rerun-failed, else 1)")
		os.Exit(2)
	}
	failed, err := run(ctx, *work, *focus, *skip, *procs, *nodes, *timeout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "conformance:", err)
		os.Exit(2)
	}
	if failed > 0 {
		os.Exit(1)
	}
}

func run(ctx context.Context, work, focus, skip string, procs, nodes int, timeout time.Duration) (failed int, err error) {
	if os.Geteuid() != 0 {
		return 0, errors.New("run as root: up's node agent makes namespaces, mounts and the pod network")
	}
	// Every host command runs in its own directory: paths must not be
	// relative.
	if work, err = filepath.Abs(work); err != nil {
		return 0, err
	}
	root, err := testenv.ModuleRoot()
	if err != nil {
		return 0, err
	}
	bin, err := filepath.Abs(filepath.Join(work, "bin"))
	if err != nil {
		return 0, err
	}
	if err := os.MkdirAll(bin, 0o700); err != nil {
		return 0, err
	}
	suite := filepath.Join(root, "test", "conformance", "e2e")
	k8sSrc, err := output(suite, "go", "list", "-m", "-f", "{{.Dir}}", "k8s.io/kubernetes")
	if err != nil {
		return 0, err
	}
	// The images' programs are static, as their images need; the suite
	// and ginkgo run here and are built as the machine's go builds. The
	// etcd the aggregator test runs is steadyplane's (this module's).
	steps := []struct {
		what, dir, pkg, out string
		static              bool
	}{
		{"the suite (e2e.test)", suite, "k8s.io/kubernetes/test/e2e", "e2e.test", false},
		{"the ginkgo CLI", suite, "github.com/onsi/ginkgo/v2/ginkgo", "ginkgo", false},
		{"agnhost", suite, "k8s.io/kubernetes/test/images/agnhost", "agnhost", true},
		{"nonewprivs", suite, "k8s.io/kubernetes/test/images/nonewprivs", "nnp", true},
		{"the sample API server", suite, "k8s.io/sample-apiserver", "sample-apiserver", true},
		{"etcd", root, "./test/conformance/etcd", "etcd", true},
	}
	for _, s := range steps {
		fmt.Printf("building %s from the module cache\n", s.what)
		args := []string{"build", "-o", filepath.Join(bin, s.out), s.pkg}
		if s.out == "e2e.test" {
			args = []string{"test", "-c", "-o", filepath.Join(bin, s.out), s.pkg}
		}
		cmd := exec.CommandContext(ctx, "go", args...)
		cmd.Dir, cmd.Stdout, cmd.Stderr = s.dir, os.Stdout, os.Stderr
		if s.static {
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		}
		if err := cmd.Run(); err != nil {
			return 0, fmt.Errorf("build %s: %w", s.pkg, err)
		}
	}
	steadyplane, err := testenv.Binary()
	if err != nil {
		return 0, err
	}
	// The suite's kubectl is steadyplane's (upstream's commands with the
	// failover transport), as a user of the cluster runs it: the binary
	// runs kubectl when called by that name.
	kubectl := filepath.Join(bin, "kubectl")
	if err := os.Remove(kubectl); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return 0, err
	}
	if err := os.Symlink(steadyplane, kubectl); err != nil {
		return 0, err
	}

	fmt.Println("making the suite's images")
	images, err := suiteImages(bin, k8sSrc)
	if err != nil {
		return 0, err
	}
	reports := filepath.Join(work, "report")
	if err := os.MkdirAll(reports, 0o700); err != nil {
		return 0, err
	}
	registryLog, err := os.Create(filepath.Join(reports, "registry.log"))
	if err != nil {
		return 0, err
	}
	defer registryLog.Close()
	// The registry listens where the nodes reach it: on loopback for one
	// up, on the hosts' bridge for a server and a worker in their own
	// network namespaces.
	listen := "127.0.0.1:0"
	var nw *testenv.Network
	if nodes == 2 {
		if nw, err = testenv.NewNetwork(2); err != nil {
			return 0, err
		}
		defer nw.Close()
		listen = net.JoinHostPort(nw.Gateway().String(), "0")
	}
	host, stopRegistry, err := serveImages(images, listen, registryLog)
	if err != nil {
		return 0, err
	}
	fmt.Println("serving the images on", host)
	defer stopRegistry()
	repos := filepath.Join(work, "repo-list.yaml")
	if err := os.WriteFile(repos, []byte(repoList(host)), 0o600); err != nil {
		return 0, err
	}

	// The suite runs here, beside the nodes: its own packets to the
	// service range must not leave by the default route either.
	undrop, err := testenv.DropServiceRange(serviceCIDR)
	if err != nil {
		return 0, err
	}
	defer undrop()
	var c cluster
	if nw == nil {
		c, err = startSingle(ctx, steadyplane, filepath.Join(work, "data"))
	} else {
		c, err = startPair(ctx, steadyplane, nw, filepath.Join(work, "cluster"), host, reports)
	}
	if err != nil {
		return 0, err
	}
	defer c.stop()

	ginkgoArgs := []string{
		"--procs", fmt.Sprint(procs), "--timeout", timeout.String(),
		"--focus", focus, "--no-color", "--succinct",
		"--output-dir", reports, "--json-report", "report.json",
	}
	if skip != "" {
		ginkgoArgs = append(ginkgoArgs, "--skip", skip)
	}
	ginkgoArgs = append(ginkgoArgs, filepath.Join(bin, "e2e.test"), "--",
		"--kubeconfig", c.kubeconfig, "--kubectl-path", kubectl,
		"--provider", "skeleton", "--report-dir", reports,
		"--e2e-output-dir", reports, "--dump-logs-on-failure=false")
	fmt.Println("running the suite; its output is in", filepath.Join(reports, "ginkgo.log"))
	logFile, err := os.Create(filepath.Join(reports, "ginkgo.log"))
	if err != nil {
		return 0, err
	}
	defer logFile.Close()
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "ginkgo"), ginkgoArgs...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Env = append(os.Environ(), "KUBE_TEST_REPO_LIST="+repos)
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	ended := make(chan struct{})
	go progress(logFile.Name(), ended)
	runErr := cmd.Wait()
	close(ended)
	results, err := readReport(filepath.Join(reports, "report.json"))
	if err != nil {
		return 0, fmt.Errorf("the suite ended (%v) without a report: %w", runErr, err)
	}
	failed = results.print(os.Stdout)
	return failed, nil
}

// progress prints, once a minute until ended closes, how long the suite
// has run and how many tests passed and failed so far (ginkgo's succinct
// output marks each passed test with a bullet).
func progress(logPath string, ended <-chan struct{}) {
	start := time.Now()
	tick := time.NewTicker(time.Minute)
	defer tick.Stop()
	for {
		select {
		case <-ended:
			return
		case <-tick.C:
			b, _ := os.ReadFile(logPath)
			fmt.Printf("%s: %d passed, %d failed so far\n", time.Since(start).Round(time.Minute),
				strings.Count(string(b), "•"), strings.Count(string(b), "[FAILED] in ["))
		}
	}
}

func output(dir, name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return "", fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, ee.Stderr)
		}
		return "", err
	}
	return strings.TrimSpace(string(out)), nil
}

// specReport is the part of ginkgo's JSON report (types.SpecReport) read here.
type specReport struct {
	ContainerHierarchyTexts []string
	LeafNodeText            string
	LeafNodeType            string
	State                   string
	RunTime                 time.Duration
	Failure                 struct{ Message string }
}

type results struct{ specs []specReport }

func readReport(path string) (results, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return results{}, err
	}
	var suites []struct{ SpecReports []specReport }
	if err := json.Unmarshal(b, &suites); err != nil {
		return results{}, fmt.Errorf("%s: %w", path, err)
	}
	var r results
	for _, s := range suites {
		for _, sp := range s.SpecReports {
			if sp.LeafNodeType == "It" {
				r.specs = append(r.specs, sp)
			}
		}
	}
	return r, nil
}

// failedFocus is a ginkgo --focus that matches the tests that did not
// pass (by their own text), or "" when all did.
func (r results) failedFocus() string {
	var texts []string
	for _, sp := range r.specs {
		if sp.State != "passed" && sp.State != "skipped" && sp.State != "pending" {
			texts = append(texts, regexp.QuoteMeta(sp.LeafNodeText))
		}
	}
	return strings.Join(texts, "|")
}

// print writes the counts and every test that did not pass, and returns
// how many failed (failed, timed out, panicked or interrupted).
func (r results) print(w *os.File) int {
	counts := map[string]int{}
	var bad []string
	for _, sp := range r.specs {
		if sp.State == "skipped" && sp.Failure.Message == "" {
			continue // left out by --focus or --skip
		}
		counts[sp.State]++
		if sp.State == "passed" || sp.State == "skipped" || sp.State == "pending" {
			continue
		}
		first, _, _ := strings.Cut(strings.TrimSpace(sp.Failure.Message), "\n")
		bad = append(bad, fmt.Sprintf("%-11s %s %s\n            %s", sp.State, strings.Join(sp.ContainerHierarchyTexts, " "), sp.LeafNodeText, first))
	}
	slices.Sort(bad)
	for _, b := range bad {
		fmt.Fprintln(w, b)
	}
	fmt.Fprintf(w, "passed %d, failed %d, skipped by the suite %d\n", counts["passed"], len(bad), counts["skipped"])
	return len(bad)
}
