package coredns

import (
	"os"
	"testing"
)

func TestNodeResolvConf(t *testing.T) {
	stub := []byte("nameserver 127.0.0.53\noptions edns0 trust-ad\n")
	real := []byte("nameserver 192.0.2.53\n")
	for _, tc := range []struct {
		name, given   string
		etc           []byte
		systemdExists bool
		want          string
	}{
		{"given: as given", "/tmp/r", stub, true, "/tmp/r"},
		{"a real server in /etc/resolv.conf", "", real, true, "/etc/resolv.conf"},
		{"systemd-resolved's stub: its list of real servers", "", stub, true, "/run/systemd/resolve/resolv.conf"},
		{"a stub without systemd's list: /etc/resolv.conf all the same", "", stub, false, "/etc/resolv.conf"},
	} {
		if got := NodeResolvConf(tc.given, tc.etc, tc.systemdExists); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
}

func writeFile(path, content string) error { return os.WriteFile(path, []byte(content), 0o644) }
