package mcp

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandpit-dev/sandpit/client"
	"github.com/sandpit-dev/sandpit/internal/desktop"
)

// The desktop tools: an MCP client drives a sandbox made from the desktop
// template (screenshot, click, type_text, key, scroll). Each runs the
// scripts of internal/desktop in the sandbox through the API's exec, after
// starting the desktop when it is not running (a start is idempotent: one
// display, one session, however many calls start it), so a model needs no
// setup call.

// shotPath is where a screenshot is left for the read that follows it.
const shotPath = "/tmp/.sandpit-mcp-screenshot.png"

// ScreenshotOutput is what screenshot answers beside the image.
type ScreenshotOutput struct {
	Bytes   int              `json:"bytes"`
	Pointer desktop.Position `json:"pointer"`
}

// ClickInput are click's arguments.
type ClickInput struct {
	SandboxID string `json:"sandbox_id" jsonschema:"the sandbox's id; it must be made from template desktop"`
	X         int    `json:"x" jsonschema:"pixels from the screen's left edge"`
	Y         int    `json:"y" jsonschema:"pixels from the screen's top edge"`
	Button    string `json:"button,omitempty" jsonschema:"left (the default), middle or right"`
	Double    bool   `json:"double,omitempty" jsonschema:"a double click"`
}

// TypeTextInput are type_text's arguments.
type TypeTextInput struct {
	SandboxID string `json:"sandbox_id" jsonschema:"the sandbox's id; it must be made from template desktop"`
	Text      string `json:"text" jsonschema:"the text to type where the keyboard focus is; a newline presses Enter"`
}

// KeyInput are key's arguments.
type KeyInput struct {
	SandboxID string `json:"sandbox_id" jsonschema:"the sandbox's id; it must be made from template desktop"`
	Keys      string `json:"keys" jsonschema:"a key or a chord joined with +: enter, tab, escape, ctrl+c, ctrl+shift+t, alt+f4, f5"`
}

// ScrollInput are scroll's arguments.
type ScrollInput struct {
	SandboxID string `json:"sandbox_id" jsonschema:"the sandbox's id; it must be made from template desktop"`
	X         int    `json:"x" jsonschema:"where to scroll, pixels from the left"`
	Y         int    `json:"y" jsonschema:"where to scroll, pixels from the top"`
	Direction string `json:"direction" jsonschema:"up, down, left or right"`
	Amount    int    `json:"amount,omitempty" jsonschema:"wheel clicks (default 1, at most 100)"`
}

func (s *server) addDesktopTools(srv *sdk.Server) {
	sdk.AddTool(srv, &sdk.Tool{Name: "screenshot", Description: "Take a screenshot of a desktop sandbox (template desktop), starting its desktop when it is not running. Returns the PNG and where the pointer is."},
		s.screenshot)
	sdk.AddTool(srv, &sdk.Tool{Name: "click", Description: "Move the pointer of a desktop sandbox to x, y and click there. Returns where the pointer is."},
		s.click)
	sdk.AddTool(srv, &sdk.Tool{Name: "type_text", Description: "Type text into a desktop sandbox where the keyboard focus is."},
		s.typeText)
	sdk.AddTool(srv, &sdk.Tool{Name: "key", Description: "Press a key or a chord (ctrl+c, enter, alt+tab) in a desktop sandbox."},
		s.key)
	sdk.AddTool(srv, &sdk.Tool{Name: "scroll", Description: "Scroll the mouse wheel of a desktop sandbox at x, y."},
		s.scroll)
}

// desktopRun starts the sandbox's desktop when it is not running, then
// runs script with args as its positional parameters, and answers what it
// left on stderr.
func (s *server) desktopRun(ctx context.Context, req *sdk.CallToolRequest, tool, id, script string, args ...string) (string, *client.Client, error) {
	if err := (SandboxInput{id}).validate(); err != nil {
		return "", nil, err
	}
	ctx, c, err := s.begin(ctx, req, tool, false)
	if err != nil {
		return "", nil, err
	}
	res, err := c.Exec(ctx, id, client.ExecRequest{
		Cmd:      "/bin/sh",
		Args:     append([]string{"-c", desktop.Prelude + desktop.StartScript("") + script, "sh"}, args...),
		TimeoutS: 120,
	})
	if err != nil {
		return "", nil, toolError(tool, err)
	}
	if res.ExitCode != 0 {
		msg := strings.TrimSpace(res.Stderr)
		if res.ExitCode == 127 || strings.Contains(msg, "not found") {
			msg += " (is the sandbox made from template desktop?)"
		}
		return "", nil, fmt.Errorf("%s: the desktop's tools failed (exit %d): %s", tool, res.ExitCode, msg)
	}
	return res.Stderr, c, nil
}

func (s *server) screenshot(ctx context.Context, req *sdk.CallToolRequest, in SandboxInput) (*sdk.CallToolResult, ScreenshotOutput, error) {
	stderr, c, err := s.desktopRun(ctx, req, "screenshot", in.SandboxID,
		"scrot --overwrite --pointer "+shotPath+" >/dev/null\n"+desktop.MouseLocation)
	if err != nil {
		return nil, ScreenshotOutput{}, err
	}
	pos, err := desktop.ParseLocation([]byte(stderr))
	if err != nil {
		return nil, ScreenshotOutput{}, fmt.Errorf("screenshot: %v", err)
	}
	png, err := readBytes(ctx, c, in.SandboxID, shotPath)
	if err != nil {
		return nil, ScreenshotOutput{}, toolError("screenshot", err)
	}
	out := ScreenshotOutput{Bytes: len(png), Pointer: pos}
	return &sdk.CallToolResult{Content: []sdk.Content{
		&sdk.ImageContent{Data: png, MIMEType: "image/png"},
		&sdk.TextContent{Text: fmt.Sprintf("screenshot, %d bytes of PNG; the pointer is at %d,%d", len(png), pos.X, pos.Y)},
	}}, out, nil
}

// checkPoint refuses coordinates no screen has.
func checkPoint(x, y int) error {
	if x < 0 || y < 0 || x > 1<<15 || y > 1<<15 {
		return badInput("x and y are between 0 and 32768")
	}
	return nil
}

func (s *server) click(ctx context.Context, req *sdk.CallToolRequest, in ClickInput) (*sdk.CallToolResult, desktop.Position, error) {
	if err := checkPoint(in.X, in.Y); err != nil {
		return nil, desktop.Position{}, err
	}
	button := desktop.ButtonNumber(in.Button)
	if button == "" {
		return nil, desktop.Position{}, badInput("button is left, middle or right, not %q", in.Button)
	}
	repeat := "1"
	if in.Double {
		repeat = "2"
	}
	stderr, _, err := s.desktopRun(ctx, req, "click", in.SandboxID,
		"xdotool mousemove --sync \"$1\" \"$2\" click --repeat \"$4\" \"$3\"\n"+desktop.MouseLocation,
		strconv.Itoa(in.X), strconv.Itoa(in.Y), button, repeat)
	if err != nil {
		return nil, desktop.Position{}, err
	}
	pos, err := desktop.ParseLocation([]byte(stderr))
	if err != nil {
		return nil, desktop.Position{}, fmt.Errorf("click: %v", err)
	}
	return text("clicked at %d,%d", pos.X, pos.Y), pos, nil
}

func (s *server) typeText(ctx context.Context, req *sdk.CallToolRequest, in TypeTextInput) (*sdk.CallToolResult, any, error) {
	if in.Text == "" {
		return nil, nil, badInput("text is required")
	}
	if _, _, err := s.desktopRun(ctx, req, "type_text", in.SandboxID, "xdotool type --delay 12 -- \"$1\"\n", in.Text); err != nil {
		return nil, nil, err
	}
	return text("typed %d characters", len([]rune(in.Text))), nil, nil
}

func (s *server) key(ctx context.Context, req *sdk.CallToolRequest, in KeyInput) (*sdk.CallToolResult, any, error) {
	keys, err := desktop.Chord(strings.Split(in.Keys, "+"))
	if err != nil {
		return nil, nil, badInput("keys: %v", err)
	}
	if _, _, err := s.desktopRun(ctx, req, "key", in.SandboxID, "xdotool key -- \"$1\"\n", keys); err != nil {
		return nil, nil, err
	}
	return text("pressed %s", keys), nil, nil
}

func (s *server) scroll(ctx context.Context, req *sdk.CallToolRequest, in ScrollInput) (*sdk.CallToolResult, any, error) {
	if err := checkPoint(in.X, in.Y); err != nil {
		return nil, nil, err
	}
	button := desktop.ScrollButton(in.Direction)
	if button == "" {
		return nil, nil, badInput("direction is up, down, left or right, not %q", in.Direction)
	}
	amount := in.Amount
	if amount == 0 {
		amount = 1
	}
	if amount < 0 || amount > 100 {
		return nil, nil, badInput("amount is between 1 and 100")
	}
	if _, _, err := s.desktopRun(ctx, req, "scroll", in.SandboxID,
		"xdotool mousemove --sync \"$1\" \"$2\" click --repeat \"$4\" \"$3\"\n",
		strconv.Itoa(in.X), strconv.Itoa(in.Y), button, strconv.Itoa(amount)); err != nil {
		return nil, nil, err
	}
	return text("scrolled %s %d at %d,%d", strings.ToLower(in.Direction), amount, in.X, in.Y), nil, nil
}
