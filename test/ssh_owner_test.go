package sandpit_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/client"
	"github.com/sandpit-dev/sandpit/test/harness"
)

// TestSSHKeyBelongsToItsOwner: a public key registered by another owner
// first (bob "squats" carol's) no longer locks its holder out: carol
// registers it too and her logins land in her own sandbox, as her. A
// registration opens its owner's sandboxes only: a key only carol
// registered does not open bob's, nor bob's key hers.
func TestSSHKeyBelongsToItsOwner(t *testing.T) {
	t.Parallel()
	requireTools(t, "ssh", "ssh-keygen")
	harness.RequireDocker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	d, port := sshDaemon(t)
	admin := d.Client()
	mint := func(owner string) *client.Client {
		tok, err := admin.CreateToken(ctx, client.TokenRequest{Name: owner, Owner: owner})
		if err != nil {
			t.Fatal(err)
		}
		return client.New(d.Addr, tok.Secret)
	}
	bob, carol := mint("bob"), mint("carol")
	dir := t.TempDir()
	carolKey, carolPub := sshKeygen(t, dir, "carol")
	carolOnlyKey, carolOnlyPub := sshKeygen(t, dir, "carol-only")
	bobKey, bobPub := sshKeygen(t, dir, "bob")
	if _, err := bob.AddSSHKey(ctx, "squatted", carolPub); err != nil {
		t.Fatalf("bob's add of carol's public key: %v", err)
	}
	if _, err := bob.AddSSHKey(ctx, "", bobPub); err != nil {
		t.Fatal(err)
	}
	if k, err := carol.AddSSHKey(ctx, "", carolPub); err != nil || k.Owner != "carol" {
		t.Fatalf("carol's add of her key after bob's: %+v %v", k, err)
	}
	if _, err := carol.AddSSHKey(ctx, "", carolOnlyPub); err != nil {
		t.Fatal(err)
	}
	mk := func(c *client.Client, owner, name string) client.Sandbox {
		sb, err := c.Create(ctx, client.CreateRequest{Name: name})
		if err != nil {
			t.Fatal(err)
		}
		sh(t, ctx, c, sb.ID, "echo "+owner+" > /tmp/owner")
		return sb
	}
	carolSB := mk(carol, "carol", "carol-box")
	bobSB := mk(bob, "bob", "bob-box")

	known := filepath.Join(dir, "known_hosts")
	as := func(key string) sshClient {
		return sshClient{t: t, addr: "127.0.0.1", port: *port, key: key, knownHosts: known}
	}
	login := func(key, user string) (string, int) {
		out, _, code := as(key).run(ctx, nil, "ssh", user+"@127.0.0.1", "cat /tmp/owner")
		return strings.TrimSpace(out), code
	}
	for _, tc := range []struct {
		what, key, user string
		owner           string // "" = refused
	}{
		{"carol's key into her sandbox by name", carolKey, "carol-box", "carol"},
		{"carol's key into her sandbox by id", carolKey, carolSB.ID, "carol"},
		{"a key only carol registered into bob's sandbox", carolOnlyKey, "bob-box", ""},
		{"a key only carol registered into bob's sandbox by id", carolOnlyKey, bobSB.ID, ""},
		{"bob's key into carol's sandbox by id", bobKey, carolSB.ID, ""},
	} {
		got, code := login(tc.key, tc.user)
		if tc.owner == "" && code != 255 {
			t.Errorf("%s: logged in (exit %d, %q), want refused", tc.what, code, got)
		}
		if tc.owner != "" && (code != 0 || got != tc.owner) {
			t.Errorf("%s: exit %d, in %q's sandbox, want %q's", tc.what, code, got, tc.owner)
		}
	}
}
