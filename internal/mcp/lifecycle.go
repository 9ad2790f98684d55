package mcp

import (
	"context"
	"fmt"
	"strings"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandpit-dev/sandpit/client"
)

// TemplateOutput is a template as list_templates reports it.
type TemplateOutput struct {
	ID    string `json:"id"`
	Name  string `json:"name,omitempty"`
	Kind  string `json:"kind,omitempty" jsonschema:"build (from a Dockerfile) or snapshot (of a sandbox)"`
	State string `json:"state,omitempty" jsonschema:"its newest build's state: building, ready or error"`
	Image string `json:"image,omitempty"`
}

// TemplatesOutput is a list of templates.
type TemplatesOutput struct {
	Templates []TemplateOutput `json:"templates"`
}

// ListTemplatesInput are list_templates' arguments: none.
type ListTemplatesInput struct{}

// PauseSandboxInput are pause_sandbox's arguments.
type PauseSandboxInput struct {
	SandboxID string `json:"sandbox_id" jsonschema:"the sandbox's id, as create_sandbox or list_sandboxes gave it"`
	Mode      string `json:"mode,omitempty" jsonschema:"memory (the default: processes are frozen and resume where they were) or filesystem (the container stops; its files are kept)"`
}

// addLifecycleTools adds the tools that list templates and stop, pause and
// resume sandboxes. Each lifecycle call carries the request's
// Idempotency-Key, and asking again for the state a sandbox is in changes
// nothing.
func (s *server) addLifecycleTools(srv *sdk.Server) {
	sdk.AddTool(srv, &sdk.Tool{Name: "list_templates", Description: "List the templates you can create sandboxes from (create_sandbox's template): built templates and snapshots.", Annotations: readOnly()},
		s.listTemplates)
	sdk.AddTool(srv, &sdk.Tool{Name: "stop_sandbox", Description: "Stop a sandbox: its processes end, its files are kept; resume_sandbox starts it again.", Annotations: &sdk.ToolAnnotations{IdempotentHint: true}},
		s.stopSandbox)
	sdk.AddTool(srv, &sdk.Tool{Name: "pause_sandbox", Description: "Pause a running sandbox (by default its processes are frozen in memory); resume_sandbox brings it back.", Annotations: &sdk.ToolAnnotations{IdempotentHint: true}},
		s.pauseSandbox)
	sdk.AddTool(srv, &sdk.Tool{Name: "resume_sandbox", Description: "Resume a paused sandbox, or start a stopped one, and wait until it runs.", Annotations: &sdk.ToolAnnotations{IdempotentHint: true}},
		s.resumeSandbox)
}

func (s *server) listTemplates(ctx context.Context, req *sdk.CallToolRequest, _ ListTemplatesInput) (*sdk.CallToolResult, TemplatesOutput, error) {
	ctx, c, err := s.begin(ctx, req, "list_templates", false)
	if err != nil {
		return nil, TemplatesOutput{}, err
	}
	ts, err := c.ListTemplates(ctx)
	if err != nil {
		return nil, TemplatesOutput{}, toolError("list_templates", err)
	}
	out := TemplatesOutput{Templates: make([]TemplateOutput, 0, len(ts))}
	lines := make([]string, 0, len(ts))
	for _, t := range ts {
		o := TemplateOutput{ID: t.ID, Name: t.Name, Kind: t.Kind, Image: t.Image}
		if t.Build != nil {
			o.State = t.Build.State
		}
		out.Templates = append(out.Templates, o)
		name := t.Name
		if name == "" {
			name = t.ID
		}
		lines = append(lines, fmt.Sprintf("%s (%s, %s)", name, o.Kind, o.State))
	}
	if len(lines) == 0 {
		return text("no templates: create_sandbox without a template uses the daemon's default image"), out, nil
	}
	return text("%s", strings.Join(lines, "\n")), out, nil
}

func (s *server) lifecycle(ctx context.Context, req *sdk.CallToolRequest, tool, id string, do func(context.Context, *client.Client) (client.Sandbox, error)) (*sdk.CallToolResult, SandboxOutput, error) {
	if err := (SandboxInput{SandboxID: id}).validate(); err != nil {
		return nil, SandboxOutput{}, err
	}
	ctx, c, err := s.begin(ctx, req, tool, true)
	if err != nil {
		return nil, SandboxOutput{}, err
	}
	sb, err := do(ctx, c)
	if err != nil {
		return nil, SandboxOutput{}, toolError(tool, err)
	}
	o := sandboxOutput(sb)
	return text("%s", o.line()), o, nil
}

func (s *server) stopSandbox(ctx context.Context, req *sdk.CallToolRequest, in SandboxInput) (*sdk.CallToolResult, SandboxOutput, error) {
	return s.lifecycle(ctx, req, "stop_sandbox", in.SandboxID, func(ctx context.Context, c *client.Client) (client.Sandbox, error) {
		return c.Stop(ctx, in.SandboxID)
	})
}

func (s *server) pauseSandbox(ctx context.Context, req *sdk.CallToolRequest, in PauseSandboxInput) (*sdk.CallToolResult, SandboxOutput, error) {
	switch in.Mode {
	case "", "memory", "filesystem":
	default:
		return nil, SandboxOutput{}, badInput("mode is memory or filesystem, got %q", in.Mode)
	}
	return s.lifecycle(ctx, req, "pause_sandbox", in.SandboxID, func(ctx context.Context, c *client.Client) (client.Sandbox, error) {
		return c.Pause(ctx, in.SandboxID, in.Mode)
	})
}

// resumeSandbox resumes a paused sandbox and starts a stopped one: to the
// agent using the tools both are "make it run again".
func (s *server) resumeSandbox(ctx context.Context, req *sdk.CallToolRequest, in SandboxInput) (*sdk.CallToolResult, SandboxOutput, error) {
	return s.lifecycle(ctx, req, "resume_sandbox", in.SandboxID, func(ctx context.Context, c *client.Client) (client.Sandbox, error) {
		sb, err := c.Get(ctx, in.SandboxID)
		if err != nil {
			return client.Sandbox{}, err
		}
		switch sb.State {
		case "running":
			return sb, nil
		case "stopped":
			return c.Start(ctx, in.SandboxID)
		}
		return c.Resume(ctx, in.SandboxID)
	})
}
