// Package testci decides what a test does when this machine cannot run it:
// outside CI it is skipped with the reason; in CI (CI=true), where
// .ci/run installs everything and runs as root, it fails, so that a test
// that did not run can never pass for one that did.
package testci

import (
	"os"
	"testing"
)

// InCI reports whether the tests run in CI.
func InCI() bool { return os.Getenv("CI") == "true" }

// CannotRun ends t because this machine cannot run it: a failure in CI, a
// skip with the reason elsewhere.
func CannotRun(t testing.TB, format string, args ...any) {
	t.Helper()
	if InCI() {
		t.Fatalf("CI must run this test, but: "+format, args...)
	}
	t.Skipf(format, args...)
}
