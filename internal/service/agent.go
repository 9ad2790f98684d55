package service

import (
	"context"

	"github.com/sandpit-dev/sandpit/internal/agentapi"
)

// Agent returns the connection to a running sandbox's agent.
func (s *Service) Agent(ctx context.Context, id string) (agentapi.Agent, error) {
	addr, token, err := s.AgentTarget(ctx, id)
	if err != nil {
		return agentapi.Agent{}, err
	}
	s.mu.Lock()
	c, ok := s.agentClients[addr]
	if !ok {
		c = agentapi.NewClients(s.agents.Client(), addr)
		s.agentClients[addr] = c
	}
	s.mu.Unlock()
	return agentapi.Agent{Addr: addr, Token: token, Process: c.Process, Filesystem: c.Filesystem}, nil
}

// AgentHTTP is the link to the agents, for their plain HTTP endpoints
// (/files) and the API's relay, sharing the Connect clients' connections.
func (s *Service) AgentHTTP() *agentapi.Link { return s.agents }
