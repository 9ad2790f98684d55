package e2b

import (
	"encoding/json"
	"fmt"
	"path"
	"regexp"
	"strconv"
	"strings"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/internal/templates"
)

// BuildStartBody is POST /v2/templates/{templateID}/builds/{buildID}: the
// steps the SDK's Template builder serialised (TemplateBuildStartV2).
type BuildStartBody struct {
	StartCmd          string          `json:"startCmd,omitempty"`
	ReadyCmd          string          `json:"readyCmd,omitempty"`
	Steps             []BuildStep     `json:"steps"`
	Force             bool            `json:"force"`
	FromImage         string          `json:"fromImage,omitempty"`
	FromTemplate      string          `json:"fromTemplate,omitempty"`
	FromImageRegistry json.RawMessage `json:"fromImageRegistry,omitempty"`
}

// BuildStep is one TemplateStep. COPY steps carry more keys (forceUpload,
// resolveSymlinks, gzip), which say how the SDK made the archive and are
// not needed to build it.
type BuildStep struct {
	Type      string   `json:"type"`
	Args      []string `json:"args"`
	Force     bool     `json:"force"`
	FilesHash string   `json:"filesHash,omitempty"`
}

// defaultBaseImage is the SDK's base image (fromBaseImage, or no from* call
// at all); it stands for the daemon's own base image.
const defaultBaseImage = "e2bdev/base"

// converted is a build body turned into what the service builds.
type converted struct {
	Dockerfile string
	Files      []templates.ContextFiles
	User       string
	Workdir    string
	NoCache    bool
	// Steps labels each Dockerfile instruction, in order, with the E2B step
	// it came from: "base" for the FROM, "1".."N" for steps[0..N-1]. The
	// engine's "Step k/n" log lines count instructions, so a failure is
	// reported against the step the user wrote.
	Steps []string
}

var (
	envKeyRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	modeRE   = regexp.MustCompile(`^[0-7]{3,4}$`)
	// userRE is an account name or uid, with an optional group, as USER
	// and COPY --chown take it.
	userRE = regexp.MustCompile(`^[A-Za-z0-9_.][A-Za-z0-9_.-]*(:[A-Za-z0-9_.][A-Za-z0-9_.-]*)?$`)
)

// errSteps wraps a body the conversion refuses: a 400 in E2B's shape.
func errSteps(format string, a ...any) error {
	return fmt.Errorf("%w: %s", sandpit.ErrInvalid, fmt.Sprintf(format, a...))
}

// runShell runs a RUN step's command as E2B does, through bash when the
// image has it (E2B's own build runs commands with bash), else sh. The
// command is the script's $1, so it reaches the shell as written, whatever
// it contains; the exec form's JSON carries newlines and quotes intact.
const runShell = `if command -v bash >/dev/null 2>&1; then exec bash -c "$1"; fi; exec sh -c "$1"`

// toDockerfile converts the steps of a build body into a Dockerfile over
// baseImage (already resolved: fromImage, the daemon's base image for
// e2bdev/base, or the image of the fromTemplate template). COPY steps take
// their files from the archive uploaded under their filesHash, which the
// build context holds under a directory of that name. A RUN with a user
// runs as that user and then returns to the current one; a user that does
// not exist fails the build at that step (see buildReason).
func toDockerfile(b BuildStartBody, baseImage string) (converted, error) {
	var (
		out   converted
		lines []string
		cur   string // the USER in effect ("" = the image's, as far as we know)
	)
	emit := func(label, line string) {
		lines = append(lines, line)
		out.Steps = append(out.Steps, label)
	}
	if err := singleLine("base image", baseImage); err != nil || strings.TrimSpace(baseImage) == "" {
		return out, errSteps("invalid base image %q", baseImage)
	}
	emit("base", "FROM "+baseImage)
	out.NoCache = b.Force
	restore := func() string {
		if cur == "" {
			// A Dockerfile cannot return to "the image's user": after a
			// step as another user, later steps run as root, which is
			// what nearly every base image runs as.
			return "root"
		}
		return cur
	}
	for i, st := range b.Steps {
		label := strconv.Itoa(i + 1)
		if st.Force {
			out.NoCache = true
		}
		for _, a := range st.Args {
			if err := singleLine(st.Type+" argument", a); err != nil && st.Type != "RUN" {
				return out, err
			}
		}
		switch st.Type {
		case "RUN":
			if len(st.Args) < 1 || len(st.Args) > 2 || strings.TrimSpace(st.Args[0]) == "" {
				return out, errSteps("step %d: RUN takes a command and an optional user", i+1)
			}
			run := execForm("/bin/sh", "-c", runShell, "run", st.Args[0])
			if len(st.Args) == 2 && st.Args[1] != "" && st.Args[1] != cur {
				user := st.Args[1]
				if !userRE.MatchString(user) {
					return out, errSteps("step %d: invalid user %q", i+1, user)
				}
				emit(label, "USER "+user)
				emit(label, "RUN "+run)
				emit(label, "USER "+restore())
				continue
			}
			emit(label, "RUN "+run)
		case "WORKDIR":
			if len(st.Args) != 1 || st.Args[0] == "" {
				return out, errSteps("step %d: WORKDIR takes one path", i+1)
			}
			emit(label, "WORKDIR "+st.Args[0])
			out.Workdir = st.Args[0]
		case "USER":
			if len(st.Args) != 1 || !userRE.MatchString(st.Args[0]) {
				return out, errSteps("step %d: USER takes one user name", i+1)
			}
			emit(label, "USER "+st.Args[0])
			cur = st.Args[0]
			out.User = cur
		case "ENV":
			if len(st.Args) == 0 {
				continue
			}
			if len(st.Args)%2 != 0 {
				return out, errSteps("step %d: ENV takes name and value pairs", i+1)
			}
			var pairs []string
			for j := 0; j < len(st.Args); j += 2 {
				if !envKeyRE.MatchString(st.Args[j]) {
					return out, errSteps("step %d: invalid environment variable name %q", i+1, st.Args[j])
				}
				pairs = append(pairs, st.Args[j]+"="+quoteEnv(st.Args[j+1]))
			}
			emit(label, "ENV "+strings.Join(pairs, " "))
		case "COPY":
			files, err := convertCopy(i, st, cur, emit, restore)
			if err != nil {
				return out, err
			}
			out.Files = append(out.Files, files)
		default:
			return out, errSteps("step %d: step type %q is not supported by sandpit", i+1, st.Type)
		}
	}
	out.Dockerfile = strings.Join(lines, "\n") + "\n"
	return out, nil
}

// convertCopy emits a COPY step: args are src (relative to the context,
// possibly a glob), dest, user ("" for none) and mode ("" or octal). It
// returns where the step's archive goes in the build context.
//
// E2B's build unpacks the archive and moves the source into place: the
// source is src up to its first wildcard (the SDK archived only what the
// wildcard matched); a directory's contents go into dest, a file or symlink
// becomes dest (or goes into it, when dest ends with "/"); symlinks stay
// symlinks. The engine's COPY follows a symlink it is given as a source,
// and every match of a wildcard; it keeps symlinks only inside a directory
// it copies. So the context holds, under a directory of the step's own,
// the source already named as it must land in dest's parent, and the COPY
// copies that directory.
func convertCopy(i int, st BuildStep, cur string, emit func(label, line string), restore func() string) (templates.ContextFiles, error) {
	label := strconv.Itoa(i + 1)
	if len(st.Args) < 2 || len(st.Args) > 4 {
		return templates.ContextFiles{}, errSteps("step %d: COPY takes a source, a destination, a user and a mode", i+1)
	}
	if st.FilesHash == "" {
		return templates.ContextFiles{}, errSteps("step %d: COPY has no filesHash", i+1)
	}
	src, dest := st.Args[0], st.Args[1]
	user, mode := "", ""
	if len(st.Args) > 2 {
		user = st.Args[2]
	}
	if len(st.Args) > 3 {
		mode = st.Args[3]
	}
	if user == "" {
		// E2B gives what a copy makes to the user the build runs as; the
		// engine would give it to root.
		user = cur
	}
	clean := path.Clean(strings.TrimPrefix(src, "./"))
	if src == "" || path.IsAbs(src) || clean == ".." || strings.HasPrefix(clean, "../") {
		return templates.ContextFiles{}, errSteps("step %d: invalid COPY source %q: it must stay within the context directory", i+1, src)
	}
	if dest == "" {
		return templates.ContextFiles{}, errSteps("step %d: COPY needs a destination", i+1)
	}
	if user != "" && !userRE.MatchString(user) {
		return templates.ContextFiles{}, errSteps("step %d: invalid COPY user %q", i+1, user)
	}
	if mode != "" && !modeRE.MatchString(mode) {
		return templates.ContextFiles{}, errSteps("step %d: invalid COPY mode %q", i+1, mode)
	}
	source := globBase(clean)
	files := templates.ContextFiles{Prefix: st.FilesHash + "." + label, Hash: st.FilesHash, Select: source}
	// into: dest is a directory the source goes into under its own name
	// (a directory's contents go there as they are).
	into := strings.HasSuffix(dest, "/") || path.Clean(dest) == "/" || path.Clean(dest) == "."
	parent := strings.TrimSuffix(dest, "/") + "/"
	target := dest
	if into {
		target = parent + path.Base(source)
	} else {
		files.As = path.Base(path.Clean(dest))
		parent = strings.TrimSuffix(path.Dir(path.Clean(dest)), "/") + "/"
	}
	flags := ""
	if user != "" {
		flags = "--chown=" + user + " "
	}
	emit(label, "COPY "+flags+execForm(files.Prefix+"/", parent))
	if mode == "" {
		return files, nil
	}
	// The engine's classic builder has no COPY --chmod: the mode is set by
	// a step of its own, on what the COPY made.
	if source != clean {
		return templates.ContextFiles{}, errSteps("step %d: a COPY mode with a wildcard source is not supported by sandpit", i+1)
	}
	emit(label, "USER root")
	emit(label, "RUN "+execForm("chmod", mode, target))
	if cur != "root" {
		emit(label, "USER "+restore())
	}
	return files, nil
}

// globBase is a cleaned COPY source up to the path element with its first
// wildcard, as E2B's build splits it ("." when the first element has one):
// the part of the archive the step copies.
func globBase(clean string) string {
	var base []string
	for _, el := range strings.Split(clean, "/") {
		if strings.ContainsAny(el, "*?[{\\") {
			break
		}
		base = append(base, el)
	}
	if len(base) == 0 {
		return "."
	}
	return strings.Join(base, "/")
}

func singleLine(what, s string) error {
	if strings.ContainsAny(s, "\n\r") {
		return errSteps("%s %q spans several lines", what, s)
	}
	return nil
}

// execForm renders a Dockerfile JSON array: every character of every
// argument survives it, unlike the shell form.
func execForm(args ...string) string {
	b, _ := json.Marshal(args)
	return string(b)
}

// quoteEnv quotes an ENV value for the Dockerfile: inside double quotes,
// backslashes, quotes and '$' (which the builder would expand) are escaped.
func quoteEnv(v string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, `$`, `\$`)
	return `"` + r.Replace(v) + `"`
}

// runCommand is the user's command in a Dockerfile instruction that
// toDockerfile wrote for a RUN step (the exec form's last element), or ""
// for any other instruction.
func runCommand(instr string) string {
	rest, ok := strings.CutPrefix(instr, "RUN ")
	if !ok {
		return ""
	}
	var argv []string
	if json.Unmarshal([]byte(rest), &argv) != nil || len(argv) == 0 {
		return ""
	}
	return argv[len(argv)-1]
}

// stepRE matches the classic builder's "Step k/n : ..." log line.
var stepRE = regexp.MustCompile(`^Step (\d+)/\d+ : `)

// unknownUserRE matches the engine's refusal of a USER that the image's
// passwd file does not have (the classic builder and BuildKit both say it).
var unknownUserRE = regexp.MustCompile(`unable to find user ([^\s:]+)`)

// buildReason is E2B's reason for a failed build: the message the SDK's
// BuildError carries and the step it points at. A step run as a user the
// image does not have gets E2B's own wording for it.
func buildReason(engineReason string, logLines []string, steps []string) (string, string) {
	step, cmd := "", ""
	for _, l := range logLines {
		if m := stepRE.FindStringSubmatch(l); m != nil {
			if k, err := strconv.Atoi(m[1]); err == nil && k >= 1 && k <= len(steps) {
				step = steps[k-1]
			}
			cmd = runCommand(strings.TrimPrefix(l, m[0]))
		}
	}
	msg := engineReason
	if m := unknownUserRE.FindStringSubmatch(engineReason); m != nil {
		// E2B names the command that could not run: "failed to run
		// command 'whoami': ...".
		if cmd != "" {
			msg = fmt.Sprintf("failed to run command '%s': user '%s' does not exist", cmd, m[1])
		} else {
			msg = fmt.Sprintf("failed to run command: user '%s' does not exist", m[1])
		}
	}
	if msg == "" {
		msg = "the build failed"
	}
	return msg, step
}
