package service

import (
	"net/url"

	"github.com/sandpit-dev/sandpit/internal/filesig"
)

// SignedFilesSandbox returns the running sandbox whose access token made the
// signature of a /files request (E2B's signed download and upload URLs), or
// "" when none did. The request names no sandbox and presents no credential,
// so the answer comes from the store's in-memory index of running sandboxes'
// tokens: anyone may ask, and asking must cost no query on the one store
// connection that every write waits for. The agent checks the signature and
// expiry again when the request reaches it.
func (s *Service) SignedFilesSandbox(method string, q url.Values) string {
	if q.Get(filesig.ParamSignature) == "" {
		return ""
	}
	return s.store.FindRunningByToken(filesig.Matcher(method, q))
}

// SandboxKnown reports, from memory, whether this daemon's store has a
// sandbox with this id: a first answer, costing no query, for requests that
// are not authenticated yet (the E2B gateway, whose agent checks the token).
func (s *Service) SandboxKnown(id string) bool {
	return s.store.SandboxKnown(id)
}
