package faults

import (
	"slices"
	"testing"
	"time"
)

func TestPlan(t *testing.T) {
	o := Options{Length: 10 * time.Minute, Servers: 3, MinGap: 2 * time.Second, MaxGap: 10 * time.Second}
	for seed := range int64(50) {
		plan := Plan(seed, o)
		if len(plan) < 20 {
			t.Fatalf("seed %d: %d faults in 10 minutes, want many", seed, len(plan))
		}
		if again := Plan(seed, o); !slices.Equal(plan, again) {
			t.Fatalf("seed %d: two plans differ", seed)
		}
		overlapping := 0
		for i, f := range plan {
			if f.At < 0 || f.End() > o.Length || f.Host < 0 || f.Host >= o.Servers || f.For <= 0 {
				t.Fatalf("seed %d: fault %+v outside the run or the servers", seed, f)
			}
			if f.Kind == Lossy && (f.LossPercent < 10 || f.LossPercent > 50) {
				t.Errorf("seed %d: lossy link dropping %d%%", seed, f.LossPercent)
			}
			if i > 0 && f.At <= plan[i-1].At {
				t.Fatalf("seed %d: faults out of order", seed)
			}
			for _, g := range plan[:i] {
				if g.End() <= f.At {
					continue
				}
				overlapping++
				if f.Down() && g.Down() && f.Host != g.Host {
					t.Fatalf("seed %d: %+v and %+v take two servers down at once", seed, g, f)
				}
				if g.Down() && f.Down() && f.Kind != BlackHole {
					t.Fatalf("seed %d: %+v joins %+v, which has its server down", seed, f, g)
				}
			}
		}
		if seed == 0 && overlapping == 0 {
			t.Errorf("no faults overlap")
		}
	}
}

func TestPlanKinds(t *testing.T) {
	plan := Plan(1, Options{Length: 5 * time.Minute, Servers: 3, Kinds: []Kind{PauseEtcd}, MinGap: time.Second, MaxGap: 3 * time.Second})
	for _, f := range plan {
		if f.Kind != PauseEtcd || f.For < time.Second || f.For > 20*time.Second {
			t.Errorf("fault %+v, want pauses of etcd of 1 to 20 s", f)
		}
	}
	if Plan(1, Options{Length: time.Minute, Servers: 0, MaxGap: time.Second}) != nil {
		t.Error("a plan with no servers")
	}
}

func TestParseKinds(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    []Kind
		wantErr bool
	}{
		{in: "", want: nil},
		{in: "kill-apiserver", want: []Kind{KillAPIServer}},
		{in: " pause-etcd , blackhole,pause-etcd,", want: []Kind{PauseEtcd, BlackHole}},
		{in: "kill-apiserver,unplug", wantErr: true},
	} {
		got, err := ParseKinds(tc.in)
		if (err != nil) != tc.wantErr || !slices.Equal(got, tc.want) {
			t.Errorf("ParseKinds(%q) = %v, %v; want %v, error %v", tc.in, got, err, tc.want, tc.wantErr)
		}
	}
}
