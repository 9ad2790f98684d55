package agent

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/sandpit-dev/sandpit/internal/agentapi"
)

const (
	// tokenFDEnv names an inherited descriptor to read the token from. The
	// agent hands the token on through a pipe rather than the environment,
	// because /proc/<pid>/environ keeps showing a process's original
	// environment however often it calls Unsetenv.
	tokenFDEnv = "SANDPIT_AGENT_TOKEN_FD"

	// childEnv marks the server process that PID 1 starts, so it serves
	// instead of supervising again.
	childEnv = "SANDPIT_AGENT_CHILD"
)

// forwardedSignals are passed from PID 1 to the server, like tini does.
func forwardedSignals() []os.Signal {
	return []os.Signal{
		syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP,
		syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2,
	}
}

// Main is the entry point of `sandpit agent`; args are the arguments after
// the subcommand (today only --listen). It reads the access token from
// SANDPIT_AGENT_TOKEN and takes it out of the environment, whose remainder
// becomes the default environment of every process.
//
// As PID 1 of a container it must also reap orphaned processes and forward
// signals. Doing that in the serving process would race exec.Cmd.Wait with
// the reaper, so PID 1 instead re-executes itself as a child that serves,
// forwards signals to it, reaps everything, and exits with the child's
// status. Outside PID 1 (tests, manual runs) Main serves directly.
func Main(ctx context.Context, args []string) int {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))

	// Root inside the sandbox must not attach to the agent (ptrace, or
	// /proc/<pid>/mem, environ and fd, which the same check guards) to read
	// its token or take over its listener. A process that is not dumpable
	// can be attached to only with CAP_SYS_PTRACE, which sandboxes do not
	// have. execve makes a process dumpable again, so this runs in every
	// image of the agent (PID 1 and the server it re-executes), and the
	// processes the agent starts are dumpable as usual.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		log.Warn("agent: cannot make the process non-dumpable; root in the sandbox may attach to it", "err", err)
	}

	fset := flag.NewFlagSet("sandpit agent", flag.ContinueOnError)
	fset.SetOutput(os.Stderr)
	listen := fset.String("listen", DefaultListen(), "address to serve the agent protocol on")
	if err := fset.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}

	token, fromEnv, err := takeToken()
	if err != nil {
		log.Error("read access token", "err", err)
		return 1
	}
	// Without a token the agent would run any command for anyone who can
	// reach its port; refuse rather than serve unauthenticated.
	if strings.TrimSpace(token) == "" {
		log.Error("refusing to start: no access token (" + agentapi.TokenEnv + " is empty or unset)")
		return 1
	}

	if os.Getpid() == 1 && os.Getenv(childEnv) == "" {
		if fromEnv {
			// Replace this process image with one whose environment holds no
			// token; it comes back here with the token on a descriptor.
			err := execWithoutToken(token)
			log.Error("re-exec without the token in the environment", "err", err)
			return 1
		}
		return supervise(ctx, token, log)
	}
	_ = os.Unsetenv(childEnv)
	defaultUser := os.Getenv(agentapi.UserEnv)
	_ = os.Unsetenv(agentapi.UserEnv)

	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	env := environMap(os.Environ())
	trustDaemonCA(env, log)
	cfg := Config{
		Listen: *listen,
		Token:  token,
		Env:    env,
		Logger: log,
		// Empty, or a name the image lacks, means root.
		DefaultUser: defaultUser,
	}
	if err := Run(ctx, cfg); err != nil {
		log.Error("agent stopped", "err", err)
		return 1
	}
	return 0
}

// takeToken reads the access token from the inherited descriptor named by
// SANDPIT_AGENT_TOKEN_FD, or else from SANDPIT_AGENT_TOKEN, and removes both
// from the environment. fromEnv reports which it was.
func takeToken() (token string, fromEnv bool, err error) {
	if fdStr, ok := os.LookupEnv(tokenFDEnv); ok {
		_ = os.Unsetenv(tokenFDEnv)
		_ = os.Unsetenv(agentapi.TokenEnv)
		fd, err := strconv.Atoi(fdStr)
		if err != nil || fd < 3 {
			return "", false, fmt.Errorf("bad %s %q", tokenFDEnv, fdStr)
		}
		unix.CloseOnExec(fd)
		f := os.NewFile(uintptr(fd), "agent-token")
		defer func() { _ = f.Close() }()
		b, err := io.ReadAll(f)
		if err != nil {
			return "", false, fmt.Errorf("read token descriptor: %w", err)
		}
		return string(b), false, nil
	}
	token, fromEnv = os.LookupEnv(agentapi.TokenEnv)
	_ = os.Unsetenv(agentapi.TokenEnv)
	return token, fromEnv, nil
}

// tokenPipe returns the read end of a pipe that already holds token, so the
// receiver can read it to EOF. The token is far smaller than a pipe buffer,
// so writing cannot block.
func tokenPipe(token string) (*os.File, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("token pipe: %w", err)
	}
	_, werr := io.WriteString(w, token)
	cerr := w.Close()
	if err := errors.Join(werr, cerr); err != nil {
		_ = r.Close()
		return nil, fmt.Errorf("write token pipe: %w", err)
	}
	return r, nil
}

// execWithoutToken replaces the process with itself, minus the token in the
// environment, passing the token on a descriptor instead. It only returns on
// failure.
func execWithoutToken(token string) error {
	r, err := tokenPipe(token)
	if err != nil {
		return err
	}
	// Dup gives a descriptor without close-on-exec, which survives the exec.
	fd, err := unix.Dup(int(r.Fd()))
	_ = r.Close()
	if err != nil {
		return fmt.Errorf("dup token pipe: %w", err)
	}
	env := append(os.Environ(), tokenFDEnv+"="+strconv.Itoa(fd))
	err = unix.Exec("/proc/self/exe", os.Args, env)
	_ = unix.Close(fd)
	return fmt.Errorf("exec /proc/self/exe: %w", err)
}

// supervise is PID 1's job: start the serving child, forward signals to it,
// reap every process that ends up parented to us, and exit with the child's
// status once it is gone.
func supervise(ctx context.Context, token string, log *slog.Logger) int {
	sigs := make(chan os.Signal, 32)
	// Subscribe before starting the child so that not even its quickest exit
	// is missed.
	signal.Notify(sigs, append(forwardedSignals(), syscall.SIGCHLD)...)
	defer signal.Stop(sigs)

	r, err := tokenPipe(token)
	if err != nil {
		log.Error("start agent server", "err", err)
		return 1
	}
	cmd := &exec.Cmd{
		Path:       "/proc/self/exe",
		Args:       os.Args,
		Env:        append(os.Environ(), childEnv+"=1", tokenFDEnv+"=3"),
		Stdin:      os.Stdin,
		Stdout:     os.Stdout,
		Stderr:     os.Stderr,
		ExtraFiles: []*os.File{r}, // becomes fd 3 in the child
	}
	err = cmd.Start()
	_ = r.Close()
	if err != nil {
		log.Error("start agent server", "err", err)
		return 1
	}
	child := cmd.Process.Pid
	// cmd.Wait is never called: the wait4(-1) loop below reaps the child
	// along with every orphan, and two waiters would steal each other's
	// exit statuses.
	runtime.KeepAlive(cmd)

	done := ctx.Done()
	for {
		select {
		case <-done:
			done = nil
			_ = syscall.Kill(child, syscall.SIGTERM)
		case sig := <-sigs:
			if sig != syscall.SIGCHLD {
				_ = syscall.Kill(child, sig.(syscall.Signal))
				continue
			}
			if status, exited := reap(child); exited {
				return status
			}
		}
	}
}

// reap collects every terminated child without blocking. It reports the
// server child's exit status (128+signal if it was killed) once it has ended.
func reap(child int) (status int, exited bool) {
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || pid <= 0 {
			return status, exited
		}
		if pid == child {
			exited = true
			switch {
			case ws.Exited():
				status = ws.ExitStatus()
			case ws.Signaled():
				status = 128 + int(ws.Signal())
			default:
				status = 1
			}
		}
	}
}

// environMap turns KEY=VALUE pairs into a map; later duplicates win, as they
// do for getenv.
func environMap(environ []string) map[string]string {
	m := make(map[string]string, len(environ))
	for _, kv := range environ {
		k, v, ok := strings.Cut(kv, "=")
		if ok && k != "" {
			m[k] = v
		}
	}
	return m
}
