// Command conformance runs the upstream Kubernetes conformance suite
// (k8s.io/kubernetes/test/e2e at the version steadyplane imports) against a
// "steadyplane up" of its own, offline: it builds e2e.test, the ginkgo CLI
// and the programs of the suite's images from the module cache, makes the
// images (internal/testimage), serves them from a registry on 127.0.0.1
// named in KUBE_TEST_REPO_LIST, and runs the focused tests in parallel.
// It prints the passed, failed and skipped counts and every failure with
// its first line, and exits 1 when a test failed.
//
// As root, from the module root:
//
//	go run ./test/conformance                       # sig-node, sig-apps, api-machinery, sig-network
//	go run ./test/conformance -focus '\[sig-node\].*Pods should be submitted and removed'
//	go run ./test/conformance -rerun-failed         # what failed last time
//
// The images are made of Debian's busybox-static (apt-get install
// busybox-static) and programs of this machine with their libraries (curl,
// dig, nc, bash as sh: images.go). Three tests cannot pass here: the
// aggregator's needs the sample-apiserver image, which is not built here,
// a DaemonSet rollback test needs two nodes, and the read-only busybox
// container's test expects busybox sh's own words for the refused write
// ("can't create /file"), which bash, the images' sh, puts otherwise.
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
	failed, err := run(ctx, *work, *focus, *skip, *procs, *timeout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "conformance:", err)
		os.Exit(2)
	}
	if failed > 0 {
		os.Exit(1)
	}
}

func run(ctx context.Context, work, focus, skip string, procs int, timeout time.Duration) (failed int, err error) {
	if os.Geteuid() != 0 {
		return 0, errors.New("run as root: up's node agent makes namespaces, mounts and the pod network")
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
	// and ginkgo run here and are built as the machine's go builds.
	steps := []struct {
		what, pkg, out string
		static         bool
	}{
		{"the suite (e2e.test)", "k8s.io/kubernetes/test/e2e", "e2e.test", false},
		{"the ginkgo CLI", "github.com/onsi/ginkgo/v2/ginkgo", "ginkgo", false},
		{"agnhost", "k8s.io/kubernetes/test/images/agnhost", "agnhost", true},
		{"nonewprivs", "k8s.io/kubernetes/test/images/nonewprivs", "nnp", true},
	}
	for _, s := range steps {
		fmt.Printf("building %s from the module cache\n", s.what)
		args := []string{"build", "-o", filepath.Join(bin, s.out), s.pkg}
		if s.out == "e2e.test" {
			args = []string{"test", "-c", "-o", filepath.Join(bin, s.out), s.pkg}
		}
		cmd := exec.CommandContext(ctx, "go", args...)
		cmd.Dir, cmd.Stdout, cmd.Stderr = suite, os.Stdout, os.Stderr
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

	fmt.Println("making the suite's images and serving them on 127.0.0.1")
	images, err := suiteImages(filepath.Join(bin, "agnhost"), filepath.Join(bin, "nnp"), k8sSrc)
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
	host, stopRegistry, err := serveImages(images, registryLog)
	if err != nil {
		return 0, err
	}
	defer stopRegistry()
	repos := filepath.Join(work, "repo-list.yaml")
	if err := os.WriteFile(repos, []byte(repoList(host)), 0o600); err != nil {
		return 0, err
	}

	undrop, err := testenv.DropServiceRange(serviceCIDR)
	if err != nil {
		return 0, err
	}
	defer undrop()

	dataDir := filepath.Join(work, "data")
	if err := freshDataDir(ctx, steadyplane, dataDir); err != nil {
		return 0, err
	}
	ports, err := testenv.FreePorts(testenv.UpPorts)
	if err != nil {
		return 0, err
	}
	upArgs, cleanup := testenv.UpArgs(dataDir, ports, 245, conformanceBridge, "--service-cidr", serviceCIDR)
	fmt.Println("starting steadyplane up:", strings.Join(upArgs, " "))
	up, err := testenv.StartUp(ctx, steadyplane, upArgs)
	if err != nil {
		cleanup()
		return 0, err
	}
	defer cleanup()
	defer up.Stop()
	fmt.Printf("up in %s\n", up.AllReady.Round(time.Second))

	ginkgoArgs := []string{
		"--procs", fmt.Sprint(procs), "--timeout", timeout.String(),
		"--focus", focus, "--no-color", "--succinct",
		"--output-dir", reports, "--json-report", "report.json",
	}
	if skip != "" {
		ginkgoArgs = append(ginkgoArgs, "--skip", skip)
	}
	ginkgoArgs = append(ginkgoArgs, filepath.Join(bin, "e2e.test"), "--",
		"--kubeconfig", filepath.Join(dataDir, "admin.kubeconfig"),
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
