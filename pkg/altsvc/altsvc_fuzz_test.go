package altsvc

import (
	"reflect"
	"testing"
)

// FuzzParse checks that Parse never panics and that whatever it accepts comes
// back unchanged through Format and Parse.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		`h2="10.0.0.2:6443"; ma=3600, h2="10.0.0.3:6443"`,
		`h2="[::1]:1"; persist=1; foo="b\"ar"`,
		`clear`, ``, `, ,`, `w%3Dx="a:1"`, `h2="a:1"; ma=99999999999999`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		h, err := Parse(in)
		if err != nil || h.Clear || len(h.Services) == 0 {
			return
		}
		again, err := Parse(Format(h.Services))
		if err != nil {
			t.Fatalf("Parse(Format(Parse(%q))) failed: %v (formatted %q)", in, err, Format(h.Services))
		}
		if !reflect.DeepEqual(again, h) {
			t.Fatalf("round trip changed %q:\n %+v\n %+v", in, h, again)
		}
	})
}
