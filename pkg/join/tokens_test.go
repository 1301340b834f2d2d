package join

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	bootstrapapi "k8s.io/cluster-bootstrap/token/api"
)

// stored is s as the API server keeps it: StringData merged into Data.
func stored(s *corev1.Secret) *corev1.Secret {
	s = s.DeepCopy()
	if s.Data == nil {
		s.Data = map[string][]byte{}
	}
	for k, v := range s.StringData {
		s.Data[k] = []byte(v)
	}
	s.StringData = nil
	return s
}

func TestTokenInfo(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	tok := Token{ID: "abcdef", Secret: "0123456789abcdef"}
	legacy := func(groups string) *corev1.Secret {
		s := stored(NewTokenSecret(tok, ServerToken, 0, now, "earlier release"))
		delete(s.Labels, TokenKindLabel)
		s.Data[bootstrapapi.BootstrapTokenExtraGroupsKey] = []byte(groups)
		return s
	}
	badExpiry := stored(NewTokenSecret(tok, WorkerToken, time.Hour, now, ""))
	badExpiry.Data[bootstrapapi.BootstrapTokenExpirationKey] = []byte("tomorrow")
	badID := stored(NewTokenSecret(tok, WorkerToken, 0, now, ""))
	badID.Data[bootstrapapi.BootstrapTokenIDKey] = []byte("ABC")
	for _, tc := range []struct {
		name        string
		secret      *corev1.Secret
		sealed      map[string]bool
		ok          bool
		kind        TokenKind
		expiredAt   time.Time
		aliveBefore time.Time
	}{
		{"a worker token for 2h", stored(NewTokenSecret(tok, WorkerToken, 2*time.Hour, now, "")), nil, true, WorkerToken, now.Add(2 * time.Hour), now.Add(2*time.Hour - time.Second)},
		{"a server token for ever", stored(NewTokenSecret(tok, ServerToken, 0, now, "")), nil, true, ServerToken, time.Time{}, now.Add(100 * 365 * 24 * time.Hour)},
		{"an earlier release's server token: it has join data", legacy(JoinGroup), map[string]bool{"abcdef": true}, true, ServerToken, time.Time{}, now},
		{"an earlier release's worker token", legacy(JoinGroup), nil, true, WorkerToken, time.Time{}, now},
		{"a token of another tool", legacy("system:bootstrappers:kubeadm:default-node-token"), nil, true, OtherToken, time.Time{}, now},
		{"an expiry that does not parse is expired", badExpiry, nil, true, WorkerToken, time.Unix(0, 0), time.Time{}},
		{"not a bootstrap token", badID, nil, false, "", time.Time{}, time.Time{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			info, ok := tokenInfo(tc.secret, tc.sealed)
			if ok != tc.ok {
				t.Fatalf("tokenInfo ok = %v, want %v", ok, tc.ok)
			}
			if !ok {
				return
			}
			if info.Kind != tc.kind || !info.Expires.Equal(tc.expiredAt) || info.Token != tok {
				t.Errorf("tokenInfo = %+v, want kind %s, expires %v, token %v", info, tc.kind, tc.expiredAt, tok)
			}
			if !tc.aliveBefore.IsZero() && info.Expired(tc.aliveBefore) {
				t.Errorf("expired at %v already", tc.aliveBefore)
			}
			if !tc.expiredAt.IsZero() && !info.Expired(tc.expiredAt) {
				t.Errorf("not expired at its expiry %v", tc.expiredAt)
			}
		})
	}
}

func TestTokenExpiryShown(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	if got := (TokenInfo{}).Expired(now); got {
		t.Error("a token with no expiry expired")
	}
	secret := NewTokenSecret(Token{ID: "abcdef", Secret: "0123456789abcdef"}, ServerToken, 24*time.Hour, now, "x")
	if got := secret.StringData[bootstrapapi.BootstrapTokenExpirationKey]; got != "2026-11-28T12:00:00Z" {
		t.Errorf("expiration %q, want 24h later in RFC 3339", got)
	}
	if secret.Labels[TokenKindLabel] != string(ServerToken) || secret.StringData[bootstrapapi.BootstrapTokenExtraGroupsKey] != JoinGroup {
		t.Errorf("a server token's secret: labels %v, groups %q", secret.Labels, secret.StringData[bootstrapapi.BootstrapTokenExtraGroupsKey])
	}
	if _, ok := NewTokenSecret(Token{ID: "abcdef", Secret: "0123456789abcdef"}, WorkerToken, 0, now, "").StringData[bootstrapapi.BootstrapTokenExpirationKey]; ok {
		t.Error("a token for ever has an expiration")
	}
}
