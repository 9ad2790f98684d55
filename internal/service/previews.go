package service

import (
	"context"
	"time"
)

// RevokeSignedPreview makes a signed preview token of sandbox id stop
// working before expiresAt, its own expiry; the revocation is stored, so it
// outlives a daemon restart. The caller has checked that the token is one
// the daemon signed for this sandbox. A token already past its expiry needs
// no record and makes none.
// In a cluster the sandbox's replicated spec carries the revocation, so it
// follows the sandbox if a failover re-creates it on another node.
func (s *Service) RevokeSignedPreview(ctx context.Context, id, token string, expiresAt time.Time) (err error) {
	if _, err := s.sandbox(ctx, id); err != nil {
		return err
	}
	now := s.now()
	if !expiresAt.After(now) {
		return nil
	}
	defer s.cluster.specChanged(ctx, id, &err)
	return s.store.RevokePreviewToken(ctx, id, token, expiresAt, now)
}

// SignedPreviewRevoked reports whether a signed preview token was revoked.
// The preview gate asks on every signed request, so a revocation takes
// effect on the next request; a point lookup by primary key is cheap next
// to the proxied request.
func (s *Service) SignedPreviewRevoked(ctx context.Context, token string) (bool, error) {
	return s.store.PreviewTokenRevoked(ctx, token)
}
