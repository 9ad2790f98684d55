package secrets

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
)

// KeyFile is the name of the file in the daemon's data directory that holds
// the key every secret's value is sealed with.
const KeyFile = "secrets-key"

// keyLen is the key's length: AES-256.
const keyLen = 32

// sealFormat is the first byte of every sealed value, so that a later
// format (another cipher, a rotated key's id) can be told apart.
const sealFormat = 1

// ErrSealBroken: a sealed value did not open, because it was altered, was
// sealed under another key, or was moved from another secret's row.
var ErrSealBroken = errors.New("the sealed secret value does not open: it was altered or sealed under another key")

// Sealer seals and opens secret values with AES-256-GCM.
type Sealer struct {
	aead cipher.AEAD
}

// NewSealer returns a sealer for a 32-byte key.
func NewSealer(key []byte) (*Sealer, error) {
	if len(key) != keyLen {
		return nil, fmt.Errorf("secrets key: %d bytes, want %d", len(key), keyLen)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("secrets key: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("secrets key: %w", err)
	}
	return &Sealer{aead: aead}, nil
}

// Seal encrypts value under a fresh random nonce. bound is authenticated
// but not stored: the same bound must be given to Open, so that a sealed
// value copied onto another secret's row does not open there.
func (s *Sealer) Seal(value, bound []byte) ([]byte, error) {
	out := make([]byte, 1+s.aead.NonceSize(), 1+s.aead.NonceSize()+len(value)+s.aead.Overhead())
	out[0] = sealFormat
	if _, err := rand.Read(out[1:]); err != nil {
		return nil, fmt.Errorf("seal secret: %w", err)
	}
	return s.aead.Seal(out, out[1:], value, bound), nil
}

// Open decrypts what Seal made with the same bound, or fails with
// ErrSealBroken.
func (s *Sealer) Open(sealed, bound []byte) ([]byte, error) {
	n := s.aead.NonceSize()
	if len(sealed) < 1+n+s.aead.Overhead() || sealed[0] != sealFormat {
		return nil, ErrSealBroken
	}
	v, err := s.aead.Open(nil, sealed[1:1+n], sealed[1+n:], bound)
	if err != nil {
		return nil, ErrSealBroken
	}
	return v, nil
}

// LoadOrCreateKey reads the hex key in path, or, when there is none, makes
// one and writes it with mode 0600. A key file that others may read, or
// that does not hold a whole key, is refused with an error naming it: it is
// never replaced, since a new key would leave every stored value unreadable.
func LoadOrCreateKey(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		key := make([]byte, keyLen)
		if _, err := rand.Read(key); err != nil {
			return nil, fmt.Errorf("secrets key: %w", err)
		}
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, fs.ErrExist) {
			// Another process made it between the read and the create.
			return LoadOrCreateKey(path)
		}
		if err != nil {
			return nil, fmt.Errorf("secrets key: %w", err)
		}
		_, werr := f.WriteString(hex.EncodeToString(key) + "\n")
		if err := errors.Join(werr, f.Sync(), f.Close()); err != nil {
			return nil, fmt.Errorf("secrets key %s: %w", path, err)
		}
		return key, nil
	}
	if err != nil {
		return nil, fmt.Errorf("secrets key: %w", err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("secrets key: %w", err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("secrets key %s: mode %v lets others read it; chmod 600 it", path, fi.Mode().Perm())
	}
	key, err := hex.DecodeString(strings.TrimSpace(string(b)))
	if err != nil || len(key) != keyLen {
		return nil, fmt.Errorf("secrets key %s: not a %d-byte hex key; restore it from a backup (a new key would leave every stored secret unreadable)", path, keyLen)
	}
	return key, nil
}
