package agent

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/sandpit-dev/sandpit/internal/filesig"
)

// signatureOK checks the signature and expiry of a /files request made
// without the access token (see package filesig for the scheme).
func (a *agent) signatureOK(r *http.Request) error {
	token := a.token()
	if token == "" {
		return nil
	}
	q := r.URL.Query()
	if exp := q.Get(filesig.ParamExpiration); exp != "" {
		secs, err := strconv.ParseInt(exp, 10, 64)
		if err != nil {
			return errors.New(filesig.ParamExpiration + " is not a Unix time")
		}
		if time.Now().Unix() > secs {
			return errors.New("signature is already expired")
		}
	}
	if !filesig.Matches(r.Method, q, token) {
		return errors.New("invalid signature for " + filesig.Operation(r.Method) + " of " + q.Get("path"))
	}
	return nil
}
