package agent

import (
	"encoding/json"
	"errors"
	"io"
	"maps"
	"net/http"
	"path/filepath"
	"sync"

	"github.com/sandpit-dev/sandpit/internal/agentapi"
)

// settings is what init may change after start; every handler reads it
// through the agent's accessors.
type settings struct {
	mu      sync.RWMutex
	token   string
	env     map[string]string
	user    string
	workdir string
}

func (a *agent) token() string {
	a.set.mu.RLock()
	defer a.set.mu.RUnlock()
	return a.set.token
}

// env returns a copy of the default environment, the caller's to change.
func (a *agent) env() map[string]string {
	a.set.mu.RLock()
	defer a.set.mu.RUnlock()
	return maps.Clone(a.set.env)
}

func (a *agent) envVar(k string) string {
	a.set.mu.RLock()
	defer a.set.mu.RUnlock()
	return a.set.env[k]
}

func (a *agent) defaultUser() string {
	a.set.mu.RLock()
	defer a.set.mu.RUnlock()
	return a.set.user
}

func (a *agent) workdir() string {
	a.set.mu.RLock()
	defer a.set.mu.RUnlock()
	return a.set.workdir
}

// init applies an agentapi.InitRequest. It is reached only through authenticate, so
// only a holder of the current token can change the token.
func (a *agent) init(w http.ResponseWriter, r *http.Request) {
	var req agentapi.InitRequest
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&req); err != nil {
		writeJSONError(w, http.StatusBadRequest, "invalid init body: "+err.Error())
		return
	}
	if req.DefaultWorkdir != "" && !filepath.IsAbs(req.DefaultWorkdir) {
		writeJSONError(w, http.StatusBadRequest, "defaultWorkdir must be absolute")
		return
	}
	for k := range req.EnvVars {
		if k == "" || k == agentapi.TokenEnv || k == agentapi.UserEnv {
			writeJSONError(w, http.StatusBadRequest, "invalid environment variable name "+k)
			return
		}
	}
	if err := a.apply(req); err != nil {
		writeJSONError(w, http.StatusBadRequest, err.Error())
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (a *agent) apply(req agentapi.InitRequest) error {
	if req.DefaultWorkdir != "" && !isDir(req.DefaultWorkdir) {
		return errors.New("defaultWorkdir " + req.DefaultWorkdir + " is not a directory")
	}
	a.set.mu.Lock()
	defer a.set.mu.Unlock()
	maps.Copy(a.set.env, req.EnvVars)
	if req.AccessToken != "" {
		a.set.token = req.AccessToken
	}
	if req.DefaultUser != "" {
		a.set.user = req.DefaultUser
	}
	if req.DefaultWorkdir != "" {
		a.set.workdir = req.DefaultWorkdir
	}
	return nil
}
