package main

import "testing"

// TestWorkersRunPodsAsServersDo: a worker's agent (node --server) gets the
// seccomp default and PID limit up gives a server's, without flags.
func TestWorkersRunPodsAsServersDo(t *testing.T) {
	cmd := newNodeCommand()
	if err := cmd.ParseFlags([]string{"--server", "https://10.0.0.1:6443", "--token-file", "t"}); err != nil {
		t.Fatal(err)
	}
	for flag, want := range map[string]string{"seccomp-default": "true", "pod-max-pids": "4096"} {
		if got := cmd.Flags().Lookup(flag).Value.String(); got != want {
			t.Errorf("node --%s = %s by default, want %s (as up's)", flag, got, want)
		}
	}
}
