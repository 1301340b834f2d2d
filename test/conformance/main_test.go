package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// A ginkgo JSON report as the suite writes it, cut to what is read.
const sampleReport = `[{"SuiteDescription":"Kubernetes e2e suite","SpecReports":[
 {"ContainerHierarchyTexts":["[sig-node] Pods"],"LeafNodeText":"should be submitted and removed","LeafNodeType":"It","State":"passed"},
 {"ContainerHierarchyTexts":["[sig-node] Variable Expansion"],"LeafNodeText":"should allow substituting values in a container's command (a+b)","LeafNodeType":"It","State":"failed","Failure":{"Message":"expected x\nmore"}},
 {"ContainerHierarchyTexts":["[sig-apps] Job"],"LeafNodeText":"should run a job","LeafNodeType":"It","State":"timedout","Failure":{"Message":"timed out"}},
 {"ContainerHierarchyTexts":["[sig-storage] CSI"],"LeafNodeText":"left out by focus","LeafNodeType":"It","State":"skipped"},
 {"ContainerHierarchyTexts":["[sig-node] AppArmor"],"LeafNodeText":"skipped by the test","LeafNodeType":"It","State":"skipped","Failure":{"Message":"AppArmor is not enabled"}},
 {"LeafNodeText":"","LeafNodeType":"SynchronizedBeforeSuite","State":"passed"}
]}]`

func TestReport(t *testing.T) {
	path := filepath.Join(t.TempDir(), "report.json")
	if err := os.WriteFile(path, []byte(sampleReport), 0o600); err != nil {
		t.Fatal(err)
	}
	r, err := readReport(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.specs) != 5 {
		t.Fatalf("%d specs, want the 5 Its", len(r.specs))
	}
	out, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	if failed := r.print(out); failed != 2 {
		t.Errorf("%d failed, want 2 (failed and timed out)", failed)
	}
	b, _ := os.ReadFile(out.Name())
	if !strings.Contains(string(b), "passed 1, failed 2, skipped by the suite 1") || !strings.Contains(string(b), "expected x") || strings.Contains(string(b), "more") {
		t.Errorf("summary:\n%s", b)
	}
	focus := regexp.MustCompile(r.failedFocus())
	for _, sp := range r.specs {
		want := sp.State == "failed" || sp.State == "timedout"
		if got := focus.MatchString(strings.Join(sp.ContainerHierarchyTexts, " ") + " " + sp.LeafNodeText); got != want {
			t.Errorf("focus %q matches %q: %v, want %v", focus, sp.LeafNodeText, got, want)
		}
	}
	if _, err := readReport(filepath.Join(t.TempDir(), "none.json")); err == nil {
		t.Error("a missing report read without an error")
	}
}

func TestRepoList(t *testing.T) {
	l := repoList("127.0.0.1:5000")
	for _, want := range []string{"promoterE2eRegistry: 127.0.0.1:5000/e2e-test-images\n", "gcRegistry: 127.0.0.1:5000\n", "invalidRegistry: 127.0.0.1:1/invalid\n"} {
		if !strings.Contains(l, want) {
			t.Errorf("repo list lacks %q:\n%s", want, l)
		}
	}
	for _, line := range strings.Split(strings.TrimSpace(l), "\n") {
		if !strings.Contains(line, "127.0.0.1:") {
			t.Errorf("%q sends a registry off the machine", line)
		}
	}
}
