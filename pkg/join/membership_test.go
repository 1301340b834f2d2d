package join

import (
	"strings"
	"testing"
)

func TestPlanJoin(t *testing.T) {
	const self = "https://10.0.0.2:2380"
	first := Member{ID: 1, Name: "steadyplane", PeerURLs: []string{"https://10.0.0.1:2380"}}
	for _, tc := range []struct {
		name    string
		members []Member
		want    JoinStep
		wantID  uint64
	}{
		{name: "a new server is added", members: []Member{first}, want: JoinAdd},
		{name: "an interrupted join resumes its learner", members: []Member{first, {ID: 2, PeerURLs: []string{self}, IsLearner: true}}, want: JoinResume, wantID: 2},
		{name: "a learner that started resumes too", members: []Member{first, {ID: 2, Name: "n2", PeerURLs: []string{self}, IsLearner: true}}, want: JoinResume, wantID: 2},
		{name: "promoted before the crash", members: []Member{first, {ID: 2, Name: "n2", PeerURLs: []string{self}}}, want: JoinMember, wantID: 2},
		{name: "another server is learning: one at a time", members: []Member{first, {ID: 3, Name: "n3", PeerURLs: []string{"https://10.0.0.3:2380"}, IsLearner: true}}, want: JoinWait, wantID: 3},
		{name: "other voters do not hold it up", members: []Member{first, {ID: 3, Name: "n3", PeerURLs: []string{"https://10.0.0.3:2380"}}}, want: JoinAdd},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, id := PlanJoin(tc.members, self)
			if got != tc.want || id != tc.wantID {
				t.Errorf("PlanJoin = %s, %d; want %s, %d", got, id, tc.want, tc.wantID)
			}
		})
	}
}

func TestInitialCluster(t *testing.T) {
	members := []Member{
		{ID: 0x1, Name: "steadyplane", PeerURLs: []string{"https://10.0.0.1:2380"}},
		{ID: 0x2a, PeerURLs: []string{"https://10.0.0.2:2380"}, IsLearner: true},
		{ID: 0x3b, PeerURLs: []string{"https://10.0.0.3:2380"}},
	}
	got := InitialCluster(members, 0x2a, "n2")
	want := "member-3b=https://10.0.0.3:2380,n2=https://10.0.0.2:2380,steadyplane=https://10.0.0.1:2380"
	if got != want {
		t.Errorf("InitialCluster =\n %s\nwant\n %s", got, want)
	}
}

func TestCanRemove(t *testing.T) {
	three := []Member{{ID: 1}, {ID: 2}, {ID: 3}}
	for _, tc := range []struct {
		name    string
		members []Member
		healthy map[uint64]bool
		target  uint64
		wantErr string
	}{
		{name: "a dead member of three, two healthy", members: three, healthy: map[uint64]bool{1: true, 2: true}, target: 3},
		{name: "a healthy member of three, all healthy", members: three, healthy: map[uint64]bool{1: true, 2: true, 3: true}, target: 3},
		{name: "a healthy member when another is down: one of two left", members: three, healthy: map[uint64]bool{1: true, 3: true}, target: 3, wantErr: "1 of the 2 members left"},
		{name: "the last member", members: []Member{{ID: 1}}, healthy: map[uint64]bool{1: true}, target: 1, wantErr: "last voting member"},
		{name: "unknown member", members: three, healthy: map[uint64]bool{1: true, 2: true, 3: true}, target: 9, wantErr: "not in the cluster"},
		{name: "a learner does not count for the quorum", members: []Member{{ID: 1}, {ID: 2}, {ID: 4, IsLearner: true}}, healthy: map[uint64]bool{1: true, 4: true}, target: 2, wantErr: ""},
		{name: "removing the learner", members: []Member{{ID: 1}, {ID: 4, IsLearner: true}}, healthy: map[uint64]bool{1: true}, target: 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CanRemove(tc.members, tc.healthy, tc.target)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("err = %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want %q", err, tc.wantErr)
			}
		})
	}
}

func TestMemberOf(t *testing.T) {
	members := []Member{
		{ID: 1, Name: "steadyplane", PeerURLs: []string{"https://10.0.0.1:2380"}},
		{ID: 2, Name: "s2", PeerURLs: []string{"https://10.0.0.2:2380"}},
	}
	for _, tc := range []struct {
		name  string
		addrs []string
		want  uint64
	}{
		{"s2", []string{"10.0.0.2"}, 2},
		{"s2", []string{"192.0.2.9"}, 2}, // by name, whatever its node address
		{"s0", []string{"10.0.0.1"}, 1},  // the first server's member, by address
		{"w4", []string{"10.0.0.4"}, 0},  // a worker
	} {
		if got := MemberOf(members, tc.name, tc.addrs); got != tc.want {
			t.Errorf("MemberOf(%s, %v) = %d, want %d", tc.name, tc.addrs, got, tc.want)
		}
	}
}
