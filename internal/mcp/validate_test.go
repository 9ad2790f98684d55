package mcp

import (
	"errors"
	"strings"
	"testing"
)

// TestArgumentValidation: every refused argument is a bad-input error that
// says what is wrong, found before any call to the daemon (the validators
// take no client).
func TestArgumentValidation(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want string // "" = accepted
	}{
		{"create: defaults", second(CreateSandboxInput{}.validate()), ""},
		{"create: image and template", second(CreateSandboxInput{Image: "a", Template: "b"}.validate()), "image or template, not both"},
		{"create: negative cpu", second(CreateSandboxInput{CPU: -1}.validate()), "cpu must not be negative"},
		{"create: negative memory", second(CreateSandboxInput{MemoryMB: -1}.validate()), "memory_mb"},
		{"create: negative timeout", second(CreateSandboxInput{TimeoutS: -1}.validate()), "timeout_s"},
		{"get: no id", SandboxInput{SandboxID: " "}.validate(), "sandbox_id is required"},
		{"run: shell", second(RunCommandInput{SandboxID: "sb1", Command: "true"}.validate()), ""},
		{"run: argv", second(RunCommandInput{SandboxID: "sb1", Argv: []string{"true"}}.validate()), ""},
		{"run: no id", second(RunCommandInput{Command: "true"}.validate()), "sandbox_id is required"},
		{"run: neither", second(RunCommandInput{SandboxID: "sb1"}.validate()), "command"},
		{"run: empty argv[0]", second(RunCommandInput{SandboxID: "sb1", Argv: []string{""}}.validate()), "command"},
		{"run: both", second(RunCommandInput{SandboxID: "sb1", Command: "true", Argv: []string{"true"}}.validate()), "not both"},
		{"run: negative timeout", second(RunCommandInput{SandboxID: "sb1", Command: "true", TimeoutS: -1}.validate()), "timeout_s"},
		{"run: long timeout", second(RunCommandInput{SandboxID: "sb1", Command: "true", TimeoutS: maxCommandTimeoutS + 1}.validate()), "at most"},
		{"code: no code", second(RunCodeInput{SandboxID: "sb1"}.validate()), "code is required"},
		{"write: no path", second(WriteFileInput{SandboxID: "sb1"}.validate()), "path is required"},
		{"write: NUL in path", second(WriteFileInput{SandboxID: "sb1", Path: "/a\x00b"}.validate()), "NUL"},
		{"write: bad base64", second(WriteFileInput{SandboxID: "sb1", Path: "/a", Content: "!!", Encoding: "base64"}.validate()), "not valid base64"},
		{"write: unknown encoding", second(WriteFileInput{SandboxID: "sb1", Path: "/a", Encoding: "latin1"}.validate()), "encoding must be"},
		{"write: too large", second(WriteFileInput{SandboxID: "sb1", Path: "/a", Content: strings.Repeat("x", maxFileBytes+1)}.validate()), "at most"},
		{"read: unknown encoding", ReadFileInput{SandboxID: "sb1", Path: "/a", Encoding: "hex"}.validate(), "encoding must be"},
		{"list: deep", ListFilesInput{SandboxID: "sb1", Path: "/", Depth: maxListDepth + 1}.validate(), "depth"},
		{"expose: port 0", second(ExposePortInput{SandboxID: "sb1"}.validate()), "between 1 and 65535"},
		{"expose: port 65536", second(ExposePortInput{SandboxID: "sb1", Port: 65536}.validate()), "between 1 and 65535"},
		{"expose: udp", second(ExposePortInput{SandboxID: "sb1", Port: 80, Protocol: "udp"}.validate()), "http or tcp"},
		{"expose: tcp", second(ExposePortInput{SandboxID: "sb1", Port: 80, Protocol: "tcp"}.validate()), ""},
		{"fork: many", second(ForkInput{SandboxID: "sb1", Count: maxForks + 1}.validate()), "count"},
		{"fork: named copies", second(ForkInput{SandboxID: "sb1", Count: 2, Name: "x"}.validate()), "count of 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.want == "" {
				if tc.err != nil {
					t.Fatalf("refused: %v", tc.err)
				}
				return
			}
			if !errors.Is(tc.err, errBadInput) || !strings.Contains(tc.err.Error(), tc.want) {
				t.Fatalf("error %v, want a bad-input error saying %q", tc.err, tc.want)
			}
		})
	}
}

func second[T any](_ T, err error) error { return err }

func TestRunCommandRequest(t *testing.T) {
	req, err := RunCommandInput{SandboxID: "sb1", Command: "echo $HOME"}.validate()
	if err != nil {
		t.Fatal(err)
	}
	if req.Cmd != "/bin/sh" || len(req.Args) != 2 || req.Args[0] != "-c" || req.Args[1] != "echo $HOME" {
		t.Errorf("shell command became %q %q", req.Cmd, req.Args)
	}
	if req.TimeoutS != defaultCommandTimeoutS {
		t.Errorf("default timeout %d, want %d", req.TimeoutS, defaultCommandTimeoutS)
	}
	req, _ = RunCommandInput{SandboxID: "sb1", Argv: []string{"ls", "-l", "/"}}.validate()
	if req.Cmd != "ls" || strings.Join(req.Args, " ") != "-l /" {
		t.Errorf("argv became %q %q", req.Cmd, req.Args)
	}
}

func TestParseResourceURI(t *testing.T) {
	for _, tc := range []struct {
		uri, id, path string
		bad           bool
	}{
		{uri: "sandpit://sandboxes/sb1", id: "sb1"},
		{uri: "sandpit://sandboxes/sb1/files/home/user/a.txt", id: "sb1", path: "/home/user/a.txt"},
		{uri: "sandpit://sandboxes/sb1/files/tmp/a%20b", id: "sb1", path: "/tmp/a b"},
		{uri: "sandpit://sandboxes/sb1/files/", bad: true},
		{uri: "sandpit://sandboxes/sb1/other/x", bad: true},
		{uri: "sandpit://sandboxes/", bad: true},
		{uri: "file:///etc/passwd", bad: true},
	} {
		id, path, err := parseResourceURI(tc.uri)
		if tc.bad {
			if !errors.Is(err, errBadInput) {
				t.Errorf("%s: accepted as %q %q", tc.uri, id, path)
			}
			continue
		}
		if err != nil || id != tc.id || path != tc.path {
			t.Errorf("%s: got %q %q %v, want %q %q", tc.uri, id, path, err, tc.id, tc.path)
		}
	}
}
