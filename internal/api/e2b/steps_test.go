package e2b

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/internal/templates"
)

func TestToDockerfile(t *testing.T) {
	const h1 = "fcd9e2b14183952356085351c9dc6d1a59ae63b7a4ced53878b71f08cda030f5"
	const h2 = "ee678e01ccac0ac17ca4e75e873f5389b157c158372122848db50d4c2da2e84d"
	run := func(cmd string) string { return "RUN " + execForm("/bin/sh", "-c", runShell, "run", cmd) }
	tests := []struct {
		name    string
		body    BuildStartBody
		want    []string // the Dockerfile's lines after FROM
		labels  []string // the step label of every line, FROM's included
		user    string
		workdir string
		files   []templates.ContextFiles
		noCache bool
		bad     string // a substring of the refusal
	}{
		{
			name:   "no steps",
			body:   BuildStartBody{},
			labels: []string{"base"},
		},
		{
			name:   "run as the current user",
			body:   BuildStartBody{Steps: []BuildStep{{Type: "RUN", Args: []string{"echo a && echo b"}}}},
			want:   []string{run("echo a && echo b")},
			labels: []string{"base", "1"},
		},
		{
			name: "run as a user goes back to the current one",
			body: BuildStartBody{Steps: []BuildStep{
				{Type: "USER", Args: []string{"user"}},
				{Type: "RUN", Args: []string{"apt-get update", "root"}},
				{Type: "RUN", Args: []string{"whoami", "user"}},
			}},
			want:   []string{"USER user", "USER root", run("apt-get update"), "USER user", run("whoami")},
			labels: []string{"base", "1", "2", "2", "2", "3"},
			user:   "user",
		},
		{
			name:   "run as a user before any USER returns to root",
			body:   BuildStartBody{Steps: []BuildStep{{Type: "RUN", Args: []string{"whoami", "nosuch"}}}},
			want:   []string{"USER nosuch", run("whoami"), "USER root"},
			labels: []string{"base", "1", "1", "1"},
		},
		{
			name:   "a multi-line command survives the exec form",
			body:   BuildStartBody{Steps: []BuildStep{{Type: "RUN", Args: []string{"echo \"a\"\necho '$HOME'"}}}},
			want:   []string{run("echo \"a\"\necho '$HOME'")},
			labels: []string{"base", "1"},
		},
		{
			name: "workdir, env and the last USER and WORKDIR",
			body: BuildStartBody{Steps: []BuildStep{
				{Type: "WORKDIR", Args: []string{"/app"}},
				{Type: "ENV", Args: []string{"FOO", "bar", "BAZ", `q "x" $y \z`}},
				{Type: "ENV", Args: []string{}},
				{Type: "WORKDIR", Args: []string{"/srv"}},
				{Type: "USER", Args: []string{"app:app"}},
			}},
			want:    []string{"WORKDIR /app", `ENV FOO="bar" BAZ="q \"x\" \$y \\z"`, "WORKDIR /srv", "USER app:app"},
			labels:  []string{"base", "1", "2", "4", "5"},
			user:    "app:app",
			workdir: "/srv",
		},
		{
			name: "each copy has a directory of its own, holding its source as it lands in dest's parent",
			body: BuildStartBody{Steps: []BuildStep{
				{Type: "COPY", Args: []string{"dir", "/app/dir", "", ""}, FilesHash: h1},
				{Type: "COPY", Args: []string{"./a.txt", "/app/", "user", ""}, FilesHash: h2},
				{Type: "COPY", Args: []string{"*.txt", "/x/", "", ""}, FilesHash: h2},
				{Type: "COPY", Args: []string{".", "/all"}, FilesHash: h1},
				{Type: "COPY", Args: []string{"folder/*", "folder", "", ""}, FilesHash: h1},
				{Type: "COPY", Args: []string{"src/**/*.go", "/", "", ""}, FilesHash: h2},
				{Type: "COPY", Args: []string{"link", "a/b/c"}, FilesHash: h1},
			}},
			want: []string{
				`COPY ["` + h1 + `.1/","/app/"]`,
				`COPY --chown=user ["` + h2 + `.2/","/app/"]`,
				`COPY ["` + h2 + `.3/","/x/"]`,
				`COPY ["` + h1 + `.4/","/"]`,
				`COPY ["` + h1 + `.5/","./"]`,
				`COPY ["` + h2 + `.6/","/"]`,
				`COPY ["` + h1 + `.7/","a/b/"]`,
			},
			labels: []string{"base", "1", "2", "3", "4", "5", "6", "7"},
			files: []templates.ContextFiles{
				{Prefix: h1 + ".1", Hash: h1, Select: "dir", As: "dir"},
				{Prefix: h2 + ".2", Hash: h2, Select: "a.txt"},
				{Prefix: h2 + ".3", Hash: h2, Select: "."},
				{Prefix: h1 + ".4", Hash: h1, Select: ".", As: "all"},
				{Prefix: h1 + ".5", Hash: h1, Select: "folder", As: "folder"},
				{Prefix: h2 + ".6", Hash: h2, Select: "src"},
				{Prefix: h1 + ".7", Hash: h1, Select: "link", As: "c"},
			},
		},
		{
			name: "a copy without a user belongs to the user the build runs as",
			body: BuildStartBody{Steps: []BuildStep{
				{Type: "USER", Args: []string{"user"}},
				{Type: "COPY", Args: []string{"a.txt", "b.txt"}, FilesHash: h1},
			}},
			want:   []string{"USER user", `COPY --chown=user ["` + h1 + `.2/","./"]`},
			labels: []string{"base", "1", "2"},
			user:   "user",
			files:  []templates.ContextFiles{{Prefix: h1 + ".2", Hash: h1, Select: "a.txt", As: "b.txt"}},
		},
		{
			name: "copy with a mode sets it as root and returns",
			body: BuildStartBody{Steps: []BuildStep{
				{Type: "USER", Args: []string{"user"}},
				{Type: "COPY", Args: []string{"a.txt", "/app/", "user", "0644"}, FilesHash: h1},
			}},
			want:   []string{"USER user", `COPY --chown=user ["` + h1 + `.2/","/app/"]`, "USER root", `RUN ["chmod","0644","/app/a.txt"]`, "USER user"},
			labels: []string{"base", "1", "2", "2", "2", "2"},
			user:   "user",
			files:  []templates.ContextFiles{{Prefix: h1 + ".2", Hash: h1, Select: "a.txt"}},
		},
		{
			name:    "force anywhere builds without the cache",
			body:    BuildStartBody{Steps: []BuildStep{{Type: "RUN", Args: []string{"date"}, Force: true}}},
			want:    []string{run("date")},
			labels:  []string{"base", "1"},
			noCache: true,
		},
		{
			name:    "top-level force",
			body:    BuildStartBody{Force: true},
			labels:  []string{"base"},
			noCache: true,
		},
		{name: "unknown step", body: BuildStartBody{Steps: []BuildStep{{Type: "ARG", Args: []string{"x"}}}}, bad: `step type "ARG"`},
		{name: "copy outside the context", body: BuildStartBody{Steps: []BuildStep{{Type: "COPY", Args: []string{"../x", "/x", "", ""}, FilesHash: h1}}}, bad: "within the context"},
		{name: "absolute copy source", body: BuildStartBody{Steps: []BuildStep{{Type: "COPY", Args: []string{"/etc", "/x", "", ""}, FilesHash: h1}}}, bad: "within the context"},
		{name: "copy without files", body: BuildStartBody{Steps: []BuildStep{{Type: "COPY", Args: []string{"a", "/x", "", ""}}}}, bad: "filesHash"},
		{name: "bad mode", body: BuildStartBody{Steps: []BuildStep{{Type: "COPY", Args: []string{"a", "/x", "", "rwx"}, FilesHash: h1}}}, bad: "mode"},
		{name: "mode with a glob", body: BuildStartBody{Steps: []BuildStep{{Type: "COPY", Args: []string{"*.txt", "/x/", "", "0600"}, FilesHash: h1}}}, bad: "wildcard"},
		{name: "user with a space", body: BuildStartBody{Steps: []BuildStep{{Type: "USER", Args: []string{"a b"}}}}, bad: "USER"},
		{name: "run user injection", body: BuildStartBody{Steps: []BuildStep{{Type: "RUN", Args: []string{"true", "root\nRUN rm -rf /"}}}}, bad: "invalid user"},
		{name: "workdir over two lines", body: BuildStartBody{Steps: []BuildStep{{Type: "WORKDIR", Args: []string{"/a\nRUN x"}}}}, bad: "lines"},
		{name: "odd env", body: BuildStartBody{Steps: []BuildStep{{Type: "ENV", Args: []string{"A"}}}}, bad: "pairs"},
		{name: "bad env name", body: BuildStartBody{Steps: []BuildStep{{Type: "ENV", Args: []string{"A=B", "c"}}}}, bad: "name"},
		{name: "empty run", body: BuildStartBody{Steps: []BuildStep{{Type: "RUN", Args: []string{" "}}}}, bad: "RUN"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := toDockerfile(tc.body, "sandpit/base:test")
			if tc.bad != "" {
				if err == nil || !strings.Contains(err.Error(), tc.bad) || !errors.Is(err, sandpit.ErrInvalid) {
					t.Fatalf("err = %v, want an invalid-request error containing %q", err, tc.bad)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := strings.Join(append([]string{"FROM sandpit/base:test"}, tc.want...), "\n") + "\n"
			if got.Dockerfile != want {
				t.Errorf("Dockerfile:\n%s\nwant:\n%s", got.Dockerfile, want)
			}
			if !slices.Equal(got.Steps, tc.labels) {
				t.Errorf("step labels %v, want %v", got.Steps, tc.labels)
			}
			if got.User != tc.user || got.Workdir != tc.workdir || got.NoCache != tc.noCache {
				t.Errorf("user %q workdir %q noCache %v, want %q %q %v", got.User, got.Workdir, got.NoCache, tc.user, tc.workdir, tc.noCache)
			}
			if !slices.Equal(got.Files, tc.files) {
				t.Errorf("files %v, want %v", got.Files, tc.files)
			}
		})
	}
}

func TestBuildReason(t *testing.T) {
	labels := []string{"base", "1", "2", "2", "2"}
	tests := []struct {
		name, engine string
		log          []string
		msg, step    string
	}{
		{
			name:   "a missing user in E2B's words, at the step that ran as it",
			engine: "unable to find user nosuch: no matching entries in passwd file",
			log:    []string{"Step 1/5 : FROM x", "Step 2/5 : RUN true", "Step 3/5 : USER nosuch", `Step 4/5 : RUN ["/bin/sh","-c","x","run","whoami"]`},
			msg:    "failed to run command 'whoami': user 'nosuch' does not exist",
			step:   "2",
		},
		{
			name:   "another failure keeps the engine's message",
			engine: "The command '/bin/sh -c false' returned a non-zero code: 1",
			log:    []string{"Step 1/2 : FROM x", "Step 2/2 : RUN false"},
			msg:    "The command '/bin/sh -c false' returned a non-zero code: 1",
			step:   "1",
		},
		{
			name:   "the base image",
			engine: "pull access denied for nosuch",
			log:    []string{"Step 1/2 : FROM nosuch"},
			msg:    "pull access denied for nosuch",
			step:   "base",
		},
		{name: "no message", msg: "the build failed"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			msg, step := buildReason(tc.engine, tc.log, labels)
			if msg != tc.msg || step != tc.step {
				t.Errorf("got %q at %q, want %q at %q", msg, step, tc.msg, tc.step)
			}
		})
	}
}
