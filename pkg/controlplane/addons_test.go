package controlplane

import (
	"slices"
	"strings"
	"testing"
)

// TestDisable: --disable leaves out the add-on controllers it names, and
// refuses a name it does not know, listing those it does.
func TestDisable(t *testing.T) {
	for _, tc := range []struct {
		disable []string
		want    []string
		err     string
	}{
		{want: []string{"local-storage", "servicelb"}},
		{disable: []string{"servicelb"}, want: []string{"local-storage"}},
		{disable: []string{"local-storage", "servicelb"}, want: nil},
		{disable: []string{"coredns"}, want: []string{"local-storage", "servicelb"}},
		{disable: []string{"traefik"}, err: `"traefik" is not one of coredns, metrics-server, local-storage, servicelb`},
	} {
		o := NewOptions()
		o.Disable = tc.disable
		err := validateDisable(o.Disable)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("--disable %v: %v; want %q", tc.disable, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("--disable %v: %v", tc.disable, err)
		}
		if got := o.addonControllers(); !slices.Equal(got, tc.want) {
			t.Errorf("--disable %v: controllers %v; want %v", tc.disable, got, tc.want)
		}
	}
}
