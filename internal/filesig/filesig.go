// Package filesig computes the signatures of E2B's signed file URLs, which
// let a client hand out one download or upload of a sandbox file without the
// sandbox's access token. The agent verifies them; the daemon uses them to
// find which sandbox a signed URL without a sandbox id belongs to.
//
// E2B's SDK signs "<path>:<operation>:<user>:<token>[:<expiration>]" as
// "v1_" + base64(sha256(...)) without padding, where path and user are the
// query parameters exactly as sent (user empty when absent), operation is
// "read" for downloads and "write" for uploads, and expiration, when the URL
// carries signature_expiration, is that Unix time in seconds.
package filesig

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"net/url"
)

// Query parameters of a signed URL.
const (
	ParamSignature  = "signature"
	ParamExpiration = "signature_expiration"
)

// Operations.
const (
	Read  = "read"
	Write = "write"
)

// Compute returns the signature of a /files URL.
func Compute(path, operation, user, token, expiration string) string {
	raw := path + ":" + operation + ":" + user + ":" + token
	if expiration != "" {
		raw += ":" + expiration
	}
	sum := sha256.Sum256([]byte(raw))
	return "v1_" + base64.RawStdEncoding.EncodeToString(sum[:])
}

// Operation is the operation a request method signs for.
func Operation(method string) string {
	if method == http.MethodGet || method == http.MethodHead {
		return Read
	}
	return Write
}

// Matches reports whether q (the query of a /files request made with
// method) carries a signature made with token. Expiry is not checked here.
func Matches(method string, q url.Values, token string) bool {
	want := Compute(q.Get("path"), Operation(method), q.Get("username"), token, q.Get(ParamExpiration))
	return subtle.ConstantTimeCompare([]byte(q.Get(ParamSignature)), []byte(want)) == 1
}

// Matcher returns a check of q's signature (a /files request made with
// method) against one candidate token at a time, for finding which of many
// tokens made it: the parts of the signed string that do not depend on the
// token are assembled once. The check is not safe for concurrent use.
func Matcher(method string, q url.Values) func(token string) bool {
	got := []byte(q.Get(ParamSignature))
	head := q.Get("path") + ":" + Operation(method) + ":" + q.Get("username") + ":"
	tail := ""
	if exp := q.Get(ParamExpiration); exp != "" {
		tail = ":" + exp
	}
	want := make([]byte, 0, 3+base64.RawStdEncoding.EncodedLen(sha256.Size))
	return func(token string) bool {
		h := sha256.New()
		h.Write([]byte(head))
		h.Write([]byte(token))
		h.Write([]byte(tail))
		var sum [sha256.Size]byte
		want = append(want[:0], "v1_"...)
		want = base64.RawStdEncoding.AppendEncode(want, h.Sum(sum[:0]))
		return subtle.ConstantTimeCompare(got, want) == 1
	}
}
