package join

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Member is one member of an etcd cluster, as MemberList reports it.
type Member struct {
	ID                   uint64
	Name                 string // empty while the member has not started
	PeerURLs, ClientURLs []string
	IsLearner            bool
}

// JoinStep is what a new server's member does next to join the cluster.
type JoinStep string

const (
	// JoinAdd adds the member as a learner.
	JoinAdd JoinStep = "Add"
	// JoinResume starts the learner an earlier, interrupted join added.
	JoinResume JoinStep = "Resume"
	// JoinMember starts a member that is already a voter.
	JoinMember JoinStep = "Member"
	// JoinWait waits: another member is learning, and etcd takes one
	// learner at a time (two joins at once is k3s's most reported HA
	// failure).
	JoinWait JoinStep = "Wait"
)

// PlanJoin decides how the member with peerURL joins members: the member
// already listed with that URL is resumed (or is a voter already);
// otherwise it is added, unless another learner is catching up. id is
// the member's, or the other learner's for JoinWait.
func PlanJoin(members []Member, peerURL string) (JoinStep, uint64) {
	for _, m := range members {
		if slices.Contains(m.PeerURLs, peerURL) {
			if m.IsLearner {
				return JoinResume, m.ID
			}
			return JoinMember, m.ID
		}
	}
	for _, m := range members {
		if m.IsLearner {
			return JoinWait, m.ID
		}
	}
	return JoinAdd, 0
}

// InitialCluster is --initial-cluster for the member self (name) joining
// members: every member's name and peer URLs, sorted; members that never
// started have no name yet and are listed under their ID.
func InitialCluster(members []Member, self uint64, name string) string {
	var parts []string
	for _, m := range members {
		n := m.Name
		if m.ID == self {
			n = name
		} else if n == "" {
			n = "member-" + strconv.FormatUint(m.ID, 16)
		}
		for _, u := range m.PeerURLs {
			parts = append(parts, n+"="+u)
		}
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

// callTimeout bounds one call to the cluster while a member joins: a
// change raft dropped (another one was pending) never answers.
const callTimeout = 10 * time.Second

// ListMembers lists the members of the cluster cli reaches, within
// callTimeout.
func ListMembers(ctx context.Context, cli *clientv3.Client) ([]Member, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	resp, err := cli.MemberList(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing etcd members: %w", err)
	}
	out := make([]Member, 0, len(resp.Members))
	for _, m := range resp.Members {
		out = append(out, Member{ID: m.ID, Name: m.Name, PeerURLs: m.PeerURLs, ClientURLs: m.ClientURLs, IsLearner: m.IsLearner})
	}
	return out, nil
}

// AddLearner adds the member name (peerURL) to the cluster cli reaches as
// a learner, or finds the one an interrupted join added; it waits, up to
// ctx, while another member is learning. It returns the member's ID and
// its --initial-cluster.
func AddLearner(ctx context.Context, cli *clientv3.Client, name, peerURL string, progressf func(string, ...any)) (uint64, string, error) {
	var lastErr error
	for {
		members, err := ListMembers(ctx, cli)
		if err != nil {
			// A leader election, or a member that just joined: the
			// context bounds how long that may last.
			progressf("etcd: %v; trying again", err)
			lastErr = err
			if werr := sleepCtx(ctx, 2*time.Second); werr != nil {
				return 0, "", fmt.Errorf("etcd: adding member %s: %w (last: %v)", name, werr, lastErr)
			}
			continue
		}
		step, id := PlanJoin(members, peerURL)
		switch step {
		case JoinMember, JoinResume:
			progressf("etcd: member %s (%s) is already in the cluster (%s)", name, peerURL, strings.ToLower(string(step)))
			return id, InitialCluster(members, id, name), nil
		case JoinAdd:
			actx, cancel := context.WithTimeout(ctx, callTimeout)
			resp, err := cli.MemberAddAsLearner(actx, []string{peerURL})
			cancel()
			if err != nil {
				// Another join got in first (too many learners, or
				// its change still pending: raft takes one at a
				// time, and drops the other, which then times out),
				// or a member that just joined is not connected yet
				// (etcd's strict reconfiguration check). A change that
				// timed out may still have been applied: the next
				// look at the members tells.
				progressf("etcd: not adding member %s yet: %v", name, err)
				lastErr = err
				break
			}
			var all []Member
			for _, m := range resp.Members {
				all = append(all, Member{ID: m.ID, Name: m.Name, PeerURLs: m.PeerURLs, IsLearner: m.IsLearner})
			}
			progressf("etcd: added member %s (%s) as a learner", name, peerURL)
			return resp.Member.ID, InitialCluster(all, resp.Member.ID, name), nil
		case JoinWait:
			progressf("etcd: member %x is still catching up as a learner; etcd takes one at a time, waiting", id)
		}
		if err := sleepCtx(ctx, 2*time.Second); err != nil {
			return 0, "", fmt.Errorf("etcd: member %s not added: %w (last: %v)", name, err, lastErr)
		}
	}
}

// sleepCtx waits d, or less when ctx ends (its error).
func sleepCtx(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// Promote makes learner id a voting member once it has caught up with the
// leader, retrying until then or until ctx ends.
func Promote(ctx context.Context, cli *clientv3.Client, id uint64, progressf func(string, ...any)) error {
	var shown time.Time
	for {
		pctx, cancel := context.WithTimeout(ctx, callTimeout)
		_, err := cli.MemberPromote(pctx, id)
		cancel()
		if err == nil {
			progressf("etcd: member %x promoted to a voting member", id)
			return nil
		}
		if errors.Is(err, rpctypes.ErrMemberNotLearner) {
			return nil
		}
		if !errors.Is(err, rpctypes.ErrMemberLearnerNotReady) && !errors.Is(err, rpctypes.ErrGRPCLearnerNotReady) {
			// Elections and a busy leader say so with other errors; the
			// context bounds how long they may last.
			progressf("etcd: promoting member %x: %v", id, err)
		} else if time.Since(shown) > 3*time.Second {
			shown = time.Now()
			progressf("etcd: member %x is catching up with the leader", id)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("etcd: member %x not promoted: %w (last: %v)", id, ctx.Err(), err)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// EnsurePeerURL sets the peer URL of the member cli's first endpoint
// serves to peerURL, when it differs: a member started alone on loopback
// has to be reachable at its host's address before another joins.
func EnsurePeerURL(ctx context.Context, cli *clientv3.Client, peerURL string) (changed bool, err error) {
	st, err := cli.Status(ctx, cli.Endpoints()[0])
	if err != nil {
		return false, fmt.Errorf("etcd status: %w", err)
	}
	members, err := ListMembers(ctx, cli)
	if err != nil {
		return false, err
	}
	for _, m := range members {
		if m.ID == st.Header.MemberId {
			if slices.Equal(m.PeerURLs, []string{peerURL}) {
				return false, nil
			}
			if _, err := cli.MemberUpdate(ctx, m.ID, []string{peerURL}); err != nil {
				return false, fmt.Errorf("etcd: setting member %s's peer URL to %s: %w", m.Name, peerURL, err)
			}
			return true, nil
		}
	}
	return false, fmt.Errorf("etcd: member %x is not in its own member list", st.Header.MemberId)
}

// CanRemove says why removing member target would cost the cluster its
// quorum, or nil: the members left must have a majority of healthy ones.
func CanRemove(members []Member, healthy map[uint64]bool, target uint64) error {
	left, up := 0, 0
	found := false
	for _, m := range members {
		if m.ID == target {
			found = true
			continue
		}
		if m.IsLearner {
			continue // learners do not vote
		}
		left++
		if healthy[m.ID] {
			up++
		}
	}
	switch {
	case !found:
		return fmt.Errorf("member %x is not in the cluster", target)
	case left == 0:
		return errors.New("it is the last voting member: removing it would end the cluster")
	case up < left/2+1:
		return fmt.Errorf("%d of the %d members left would be healthy, short of a quorum of %d: bring the others back first", up, left, left/2+1)
	}
	return nil
}

// MemberHealth says which members answer a status request on one of
// their client URLs within timeout.
func MemberHealth(ctx context.Context, cli *clientv3.Client, members []Member, timeout time.Duration) map[uint64]bool {
	out := map[uint64]bool{}
	for _, m := range members {
		for _, u := range m.ClientURLs {
			sctx, cancel := context.WithTimeout(ctx, timeout)
			_, err := cli.Status(sctx, u)
			cancel()
			if err == nil {
				out[m.ID] = true
				break
			}
		}
	}
	return out
}

// MemberOf is the member of node name: the one of that name (a joined
// server's member is named after its node), or the one whose peer URL is
// at one of the node's addresses (the first server's, named steadyplane);
// 0 for none (a worker).
func MemberOf(members []Member, name string, addresses []string) uint64 {
	for _, m := range members {
		if m.Name == name {
			return m.ID
		}
	}
	for _, m := range members {
		for _, p := range m.PeerURLs {
			if u, err := url.Parse(p); err == nil && slices.Contains(addresses, u.Hostname()) {
				return m.ID
			}
		}
	}
	return 0
}
