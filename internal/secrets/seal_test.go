package secrets_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/sandpit-dev/sandpit/internal/secrets"
)

func sealer(t *testing.T, fill byte) *secrets.Sealer {
	t.Helper()
	s, err := secrets.NewSealer(bytes.Repeat([]byte{fill}, 32))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestSealRefusesWhatItDidNotSeal: a sealed value opens only under its key
// and the row it was sealed for; a flipped bit anywhere, another key or
// another row's binding is refused, never opened into something else.
func TestSealRefusesWhatItDidNotSeal(t *testing.T) {
	s := sealer(t, 1)
	value, bound := []byte("ghp_example-token"), []byte("alice\x00sec_a")
	sealed, err := s.Seal(value, bound)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(sealed, value) {
		t.Fatal("the sealed value holds the value in the clear")
	}
	got, err := s.Open(sealed, bound)
	if err != nil || !bytes.Equal(got, value) {
		t.Fatalf("open = %q, %v", got, err)
	}
	again, _ := s.Seal(value, bound)
	if bytes.Equal(again, sealed) {
		t.Fatal("two seals of one value are equal: the nonce is not fresh")
	}
	flip := func(i int) []byte {
		b := bytes.Clone(sealed)
		b[i] ^= 1
		return b
	}
	cases := []struct {
		name   string
		s      *secrets.Sealer
		sealed []byte
		bound  []byte
	}{
		{"format byte", s, flip(0), bound},
		{"nonce", s, flip(3), bound},
		{"ciphertext", s, flip(len(sealed) / 2), bound},
		{"tag", s, flip(len(sealed) - 1), bound},
		{"truncated", s, sealed[:len(sealed)-1], bound},
		{"empty", s, nil, bound},
		{"wrong key", sealer(t, 2), sealed, bound},
		{"another owner's row", s, sealed, []byte("mallory\x00sec_a")},
		{"another secret's row", s, sealed, []byte("alice\x00sec_b")},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got, err := tc.s.Open(tc.sealed, tc.bound); !errors.Is(err, secrets.ErrSealBroken) {
				t.Fatalf("open = %q, %v; want ErrSealBroken", got, err)
			}
		})
	}
}

// TestKeyFile: the key is made at first use with mode 0600 and read back
// the same; a key file others may read, or a short one, is refused and left
// as it is, never replaced by a new key.
func TestKeyFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, secrets.KeyFile)
	key, err := secrets.LoadOrCreateKey(path)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode %v, want 0600", fi.Mode().Perm())
	}
	again, err := secrets.LoadOrCreateKey(path)
	if err != nil || !bytes.Equal(again, key) {
		t.Fatalf("second load: %v (same key: %v)", err, bytes.Equal(again, key))
	}

	cases := []struct {
		name    string
		content string
		mode    os.FileMode
	}{
		{"readable by others", string(mustRead(t, path)), 0o644},
		{"short", "abcd\n", 0o600},
		{"empty", "", 0o600},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), secrets.KeyFile)
			if err := os.WriteFile(p, []byte(tc.content), tc.mode); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(p, tc.mode); err != nil {
				t.Fatal(err)
			}
			if _, err := secrets.LoadOrCreateKey(p); err == nil {
				t.Fatal("the key file was accepted")
			}
			if got := string(mustRead(t, p)); got != tc.content {
				t.Fatalf("the key file was rewritten: %q", got)
			}
		})
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
