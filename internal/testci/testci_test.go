package testci

import "testing"

func TestInCI(t *testing.T) {
	t.Setenv("CI", "true")
	if !InCI() {
		t.Error("CI=true not seen")
	}
	t.Setenv("CI", "")
	if InCI() {
		t.Error("CI unset seen as CI")
	}
}
