package agent

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"net/http"
	"strconv"
	"time"
)

// Signed /files URLs let a client hand out one download or upload without
// the access token. E2B's SDK computes the signature as
//
//	"v1_" + base64(sha256("<path>:<operation>:<user>:<token>[:<expiration>]"))
//
// with the padding stripped, where path and user are the query parameters
// exactly as sent, operation is "read" or "write" and expiration, when the
// URL carries signature_expiration, is that Unix time in seconds.

const signaturePrefix = "v1_"

// fileSignature computes the signature of a /files URL.
func fileSignature(path, operation, user, token, expiration string) string {
	raw := path + ":" + operation + ":" + user + ":" + token
	if expiration != "" {
		raw += ":" + expiration
	}
	sum := sha256.Sum256([]byte(raw))
	return signaturePrefix + base64.RawStdEncoding.EncodeToString(sum[:])
}

// signatureOK checks the signature and expiry of a /files request made
// without the access token.
func (a *agent) signatureOK(r *http.Request) error {
	if a.cfg.Token == "" {
		return nil
	}
	q := r.URL.Query()
	operation := "read"
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		operation = "write"
	}
	exp := q.Get("signature_expiration")
	if exp != "" {
		secs, err := strconv.ParseInt(exp, 10, 64)
		if err != nil {
			return errors.New("signature_expiration is not a Unix time")
		}
		if time.Now().Unix() > secs {
			return errors.New("signature is already expired")
		}
	}
	want := fileSignature(q.Get("path"), operation, q.Get("username"), a.cfg.Token, exp)
	if subtle.ConstantTimeCompare([]byte(q.Get("signature")), []byte(want)) != 1 {
		return errors.New("invalid signature for " + operation + " of " + q.Get("path"))
	}
	return nil
}
