package runtime

import (
	"errors"
	"strings"
	"testing"
)

func TestChoose(t *testing.T) {
	missing := errors.New("runc is not installed")
	cases := []struct {
		mode        string
		unavailable error
		name        string
		warns       bool
		err         bool
	}{
		{"auto", nil, "runc", false, false},
		{"", nil, "runc", false, false},
		{"auto", missing, "", false, true},
		{"runc", nil, "runc", false, false},
		{"runc", missing, "", false, true},
		{"process", nil, "process", true, false},
		{"process", missing, "process", true, false},
		{"docker", nil, "", false, true},
	}
	for _, tc := range cases {
		name, warning, err := Choose(tc.mode, tc.unavailable)
		if name != tc.name || (warning != "") != tc.warns || (err != nil) != tc.err {
			t.Errorf("Choose(%q, %v) = %q, %q, %v", tc.mode, tc.unavailable, name, warning, err)
		}
		if tc.warns && !strings.Contains(warning, "NOT isolated") {
			t.Errorf("warning %q does not say pods are not isolated", warning)
		}
	}
}
