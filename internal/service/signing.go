package service

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"strconv"
	"time"

	"github.com/sandpit-dev/sandpit"
)

// Signed file URLs in Daytona's scheme: the SDK fetches a sandbox's signing
// key, signs "v1:files:<METHOD>:<path>:<expires>" with HMAC-SHA256 and puts
// "v1_" and the base64url digest in the URL, which then works without any
// credential until it expires (0: never) or the key is rotated.

// signaturePrefix starts every signature of this scheme's first version.
const signaturePrefix = "v1_"

func newSigningKey() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// SigningKey returns the key the sandbox's signed file URLs are made with,
// making one the first time. Asking again returns the same key.
func (s *Service) SigningKey(ctx context.Context, id string) (string, error) {
	if _, err := s.sandbox(ctx, id); err != nil {
		return "", err
	}
	fresh, err := newSigningKey()
	if err != nil {
		return "", err
	}
	return s.store.EnsureSigningKey(ctx, id, fresh)
}

// RotateSigningKey gives the sandbox a new signing key, so every URL signed
// with the old one stops working, and returns it. A retried rotation
// rotates again: the answer is always the key now in force.
func (s *Service) RotateSigningKey(ctx context.Context, id string) (_ string, err error) {
	if _, err := s.sandbox(ctx, id); err != nil {
		return "", err
	}
	defer func() { s.audit(ctx, "sandbox.signing_key.rotate", id, err) }()
	key, err := newSigningKey()
	if err != nil {
		return "", err
	}
	if err := s.store.SetSigningKey(ctx, id, key, s.now()); err != nil {
		return "", err
	}
	return key, nil
}

// FileSignature is the signature of a file operation in Daytona's scheme.
func FileSignature(key, method, path string, expires int64) string {
	m := hmac.New(sha256.New, []byte(key))
	fmt.Fprintf(m, "v1:files:%s:%s:%d", method, path, expires)
	return signaturePrefix + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// SignedFileSandbox checks a signed file URL of sandbox id: method and path
// of the operation, expires (Unix seconds, "0" for never) and signature as
// the URL carries them. It returns the sandbox, whose owner the request then
// acts as for that one operation, or sandpit.ErrUnauthorized when the signature is
// not the sandbox's current key's, or has expired.
func (s *Service) SignedFileSandbox(ctx context.Context, id, method, path, expires, signature string) (sandpit.Sandbox, error) {
	exp, err := strconv.ParseInt(expires, 10, 64)
	if err != nil || exp < 0 || path == "" {
		return sandpit.Sandbox{}, fmt.Errorf("%w: a signed URL needs path, expires and signature", sandpit.ErrUnauthorized)
	}
	if exp != 0 && s.now().After(time.Unix(exp, 0)) {
		return sandpit.Sandbox{}, fmt.Errorf("%w: the signed URL expired", sandpit.ErrUnauthorized)
	}
	key, err := s.store.SigningKey(ctx, id)
	if err != nil || key == "" {
		// An unknown sandbox answers as a bad signature: a signed URL
		// must not tell which sandbox ids exist.
		return sandpit.Sandbox{}, fmt.Errorf("%w: the signature is not valid", sandpit.ErrUnauthorized)
	}
	if !hmac.Equal([]byte(FileSignature(key, method, path, exp)), []byte(signature)) {
		return sandpit.Sandbox{}, fmt.Errorf("%w: the signature is not valid", sandpit.ErrUnauthorized)
	}
	return s.store.GetSandbox(ctx, id)
}
