package main

import (
	"errors"
	"os"
	"os/signal"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/sandpit-dev/sandpit/client"
)

// execStreams connects an exec to this process's terminal or pipes. Piped
// input (a file or a pipe on stdin) always passes to the command, so
// `printf 'echo hi' | sandpit exec ID -- sh` does what it says; a terminal
// passes only with -i, so a plain exec from a shell does not wait on the
// keyboard. With -t the command runs under a pseudo-terminal: the local
// terminal goes raw (keys, Ctrl-C included, reach the remote terminal,
// whose line discipline turns Ctrl-C into SIGINT), and its size follows
// the local one. restore puts the local terminal back.
func execStreams(cmd *cobra.Command, interactive, tty bool) (client.ExecStreams, func(), error) {
	s := client.ExecStreams{Stdout: cmd.OutOrStdout(), Stderr: cmd.ErrOrStderr()}
	in := cmd.InOrStdin()
	f, isFile := in.(*os.File)
	inTerminal := isFile && isTerminal(f)
	if interactive || (!inTerminal && in != nil && !isDevNull(f)) {
		s.Stdin = in
	}
	if !tty {
		return s, func() {}, nil
	}
	if !inTerminal {
		return s, nil, errors.New("-t needs a terminal on stdin (the input is not a TTY); drop -t to pipe input")
	}
	fd := int(f.Fd())
	old, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return s, nil, err
	}
	raw := *old
	// cfmakeraw: no echo, no line editing, no signals from keys locally.
	raw.Iflag &^= unix.IGNBRK | unix.BRKINT | unix.PARMRK | unix.ISTRIP | unix.INLCR | unix.IGNCR | unix.ICRNL | unix.IXON
	raw.Oflag &^= unix.OPOST
	raw.Lflag &^= unix.ECHO | unix.ECHONL | unix.ICANON | unix.ISIG | unix.IEXTEN
	raw.Cflag &^= unix.CSIZE | unix.PARENB
	raw.Cflag |= unix.CS8
	raw.Cc[unix.VMIN], raw.Cc[unix.VTIME] = 1, 0
	if err := unix.IoctlSetTermios(fd, unix.TCSETS, &raw); err != nil {
		return s, nil, err
	}
	size := func() client.TTYSize {
		ws, err := unix.IoctlGetWinsize(fd, unix.TIOCGWINSZ)
		if err != nil || ws.Col == 0 {
			return client.TTYSize{Cols: 80, Rows: 24}
		}
		return client.TTYSize{Cols: ws.Col, Rows: ws.Row}
	}
	first := size()
	s.TTY = &first
	s.Stdin = in
	resize := make(chan client.TTYSize, 1)
	winch := make(chan os.Signal, 1)
	signal.Notify(winch, unix.SIGWINCH)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			case <-winch:
				select {
				case resize <- size():
				default:
				}
			}
		}
	}()
	s.Resize = resize
	return s, func() {
		signal.Stop(winch)
		close(done)
		_ = unix.IoctlSetTermios(fd, unix.TCSETS, old)
	}, nil
}

// isDevNull reports whether f is /dev/null, which needs no passing on.
func isDevNull(f *os.File) bool {
	if f == nil {
		return false
	}
	a, err := f.Stat()
	if err != nil {
		return false
	}
	b, err := os.Stat(os.DevNull)
	return err == nil && os.SameFile(a, b)
}
