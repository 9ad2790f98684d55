package store_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit"
)

func sshKey(fp, owner, name string) sandpit.SSHKey {
	return sandpit.SSHKey{Fingerprint: fp, Owner: owner, Name: name, Type: "ssh-ed25519", PublicKey: "ssh-ed25519 AAAA" + fp}
}

// TestAddSSHKeyOutcomes: the same key again is the one row, whatever name
// the retry gives; another owner's registration of it and another key
// under a taken name are refused, and leave nothing behind.
func TestAddSSHKeyOutcomes(t *testing.T) {
	s, _ := openStore(t)
	ctx := context.Background()
	if _, out, err := s.AddSSHKey(ctx, sshKey("SHA256:a", "alice", "laptop"), time.Time{}); err != nil || out != sandpit.Added {
		t.Fatalf("first add: %v %v", out, err)
	}
	for _, c := range []struct {
		what    string
		key     sandpit.SSHKey
		outcome sandpit.AddOutcome
		err     error
	}{
		{"the same key again", sshKey("SHA256:a", "alice", "laptop"), sandpit.AlreadyBound, nil},
		{"the same key under another name", sshKey("SHA256:a", "alice", "desktop"), sandpit.AlreadyBound, nil},
		{"another key under a taken name", sshKey("SHA256:b", "alice", "laptop"), 0, sandpit.ErrNameConflict},
		{"another owner's key of that name", sshKey("SHA256:c", "bob", "laptop"), sandpit.Added, nil},
		// A public key is public: another owner may register it too, and
		// has a row of their own (a login is accepted only for the
		// sandboxes of the owner whose row admits it).
		{"the same key for another owner", sshKey("SHA256:a", "carol", "laptop"), sandpit.Added, nil},
		{"the same key for that owner again", sshKey("SHA256:a", "carol", "other"), sandpit.AlreadyBound, nil},
	} {
		k, out, err := s.AddSSHKey(ctx, c.key, time.Time{})
		if out != c.outcome || !errors.Is(err, c.err) || (err == nil && k.Owner != c.key.Owner) {
			t.Errorf("%s: %+v %v %v, want %v %v", c.what, k, out, err, c.outcome, c.err)
		}
	}
	if ks, err := s.ListSSHKeys(ctx, "alice"); err != nil || len(ks) != 1 || ks[0].Name != "laptop" {
		t.Fatalf("alice's keys: %+v %v", ks, err)
	}
	if ks, err := s.SSHKeysByFingerprint(ctx, "SHA256:a"); err != nil || len(ks) != 2 || ks[0].Owner != "alice" || ks[1].Owner != "carol" {
		t.Fatalf("registrations of SHA256:a: %+v %v", ks, err)
	}
	// An admin's delete by a fingerprint two owners registered names
	// neither; carol's own delete removes her row only.
	if _, err := s.DeleteSSHKey(ctx, "", "SHA256:a"); !errors.Is(err, sandpit.ErrNameConflict) {
		t.Fatalf("admin delete of a key two owners registered: %v", err)
	}
	if k, err := s.DeleteSSHKey(ctx, "carol", "SHA256:a"); err != nil || k.Owner != "carol" {
		t.Fatalf("carol's delete: %+v %v", k, err)
	}
	// Removal is per owner: bob cannot remove alice's key by name or
	// fingerprint.
	if _, err := s.DeleteSSHKey(ctx, "bob", "SHA256:a"); !errors.Is(err, sandpit.ErrNotFound) {
		t.Fatalf("bob's delete of alice's key: %v", err)
	}
	if k, err := s.DeleteSSHKey(ctx, "bob", "laptop"); err != nil || k.Fingerprint != "SHA256:c" {
		t.Fatalf("bob's delete of his laptop: %+v %v", k, err)
	}
	if _, err := s.DeleteSSHKey(ctx, "", "laptop"); err != nil {
		t.Fatalf("admin delete of the one laptop left: %v", err)
	}
	if ks, _ := s.ListSSHKeys(ctx, ""); len(ks) != 0 {
		t.Fatalf("keys left: %+v", ks)
	}
}

// TestAddSSHKeyConcurrently: racing adds of one key make one row.
func TestAddSSHKeyConcurrently(t *testing.T) {
	s, _ := openStore(t)
	ctx := context.Background()
	var added atomic.Int32
	var wg sync.WaitGroup
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, out, err := s.AddSSHKey(ctx, sshKey("SHA256:x", "alice", "k"), time.Time{})
			if err != nil {
				t.Error(err)
			}
			if out == sandpit.Added {
				added.Add(1)
			}
		}()
	}
	wg.Wait()
	if n := added.Load(); n != 1 {
		t.Fatalf("%d adds made a row, want 1", n)
	}
}
