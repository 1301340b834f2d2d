package controlplane

import "testing"

func TestOwnsNodeAddress(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*Options)
		root   bool
		want   bool
	}{
		{"the defaults as root: an address on the pod bridge", func(*Options) {}, true, true},
		{"not root: no bridge can be made", func(*Options) {}, false, false},
		{"host processes: no pod network", func(o *Options) { o.NodeRuntime = "process" }, true, false},
		{"no node agent", func(o *Options) { o.Node = false }, true, false},
		{"a named bind address is used as given", func(o *Options) { o.BindAddress = "10.0.0.1" }, true, false},
		{"a named advertise address is used as given", func(o *Options) { o.AdvertiseAddress = "10.0.0.1" }, true, false},
		{"a named node IP is used as given", func(o *Options) { o.NodeIP = "10.0.0.1" }, true, false},
		{"every address (0.0.0.0) is not loopback only", func(o *Options) { o.BindAddress = "0.0.0.0" }, true, false},
		{"another loopback address", func(o *Options) { o.BindAddress = "127.0.0.2" }, true, true},
	}
	for _, tc := range tests {
		o := NewOptions()
		tc.mutate(o)
		if got := OwnsNodeAddress(*o, tc.root); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
