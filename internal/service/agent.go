package service

import (
	"context"
	"net/http"
	"time"

	"github.com/sandpit-dev/sandpit/internal/agentapi"
)

// agentLink is the one HTTP client through which the daemon reaches the
// agents; the API's relay shares its transport (AgentHTTP).
type agentLink struct {
	http *http.Client
}

func newAgentLink() *agentLink {
	// No overall timeout: a command's stream lasts as long as the command,
	// a file transfer as long as the file.
	transport := &http.Transport{MaxIdleConnsPerHost: 16, IdleConnTimeout: 90 * time.Second}
	return &agentLink{http: &http.Client{Transport: transport}}
}

// Agent returns the connection to a running sandbox's agent.
func (s *Service) Agent(ctx context.Context, id string) (agentapi.Agent, error) {
	addr, token, err := s.AgentTarget(ctx, id)
	if err != nil {
		return agentapi.Agent{}, err
	}
	s.mu.Lock()
	c, ok := s.agentClients[addr]
	if !ok {
		c = agentapi.NewClients(s.agents.http, addr)
		s.agentClients[addr] = c
	}
	s.mu.Unlock()
	return agentapi.Agent{Addr: addr, Token: token, Process: c.Process, Filesystem: c.Filesystem}, nil
}

// AgentHTTP is the client for the agent's plain HTTP endpoints (/files),
// sharing the Connect clients' connections.
func (s *Service) AgentHTTP() *http.Client { return s.agents.http }
