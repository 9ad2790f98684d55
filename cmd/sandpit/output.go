package main

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"
)

// Output formats of --output.
const (
	outputText = "text"
	outputJSON = "json"
)

// validOutput checks --output before any command runs.
func (e *cliEnv) validOutput() error {
	switch e.output {
	case outputText, outputJSON:
		return nil
	}
	return fmt.Errorf("invalid --output %q: want text or json", e.output)
}

// jsonOut reports whether the command prints JSON: --output json, or a
// command's own older --json flag.
func (e *cliEnv) jsonOut(legacy bool) bool { return legacy || e.output == outputJSON }

// emit prints v as indented JSON with --output json, else runs text.
func (e *cliEnv) emit(cmd *cobra.Command, v any, text func(w io.Writer) error) error {
	if e.jsonOut(false) {
		return printJSON(cmd.OutOrStdout(), v)
	}
	return text(cmd.OutOrStdout())
}

// isTerminal reports whether f is a terminal.
func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// interactive reports whether progress may be drawn: only when the command
// writes to a terminal (stdout) and stderr, where it is drawn, is one too. A
// pipe or a file never receives spinner frames or carriage returns.
func (e *cliEnv) interactive(cmd *cobra.Command) bool {
	out, ok1 := cmd.OutOrStdout().(*os.File)
	errw, ok2 := cmd.ErrOrStderr().(*os.File)
	return ok1 && ok2 && !e.jsonOut(false) && isTerminal(out) && isTerminal(errw)
}

// ticker redraws one status line on a terminal until stopped.
type ticker struct {
	w     io.Writer
	start time.Time
	stop  chan struct{}
	done  chan struct{}
	mu    sync.Mutex
	line  func(elapsed time.Duration, frame int) string
}

// startTicker draws line every 100ms on w; stop clears it.
func startTicker(w io.Writer, line func(elapsed time.Duration, frame int) string) *ticker {
	t := &ticker{w: w, start: time.Now(), stop: make(chan struct{}), done: make(chan struct{}), line: line}
	go func() {
		defer close(t.done)
		tk := time.NewTicker(100 * time.Millisecond)
		defer tk.Stop()
		for frame := 0; ; frame++ {
			t.draw(frame)
			select {
			case <-t.stop:
				return
			case <-tk.C:
			}
		}
	}()
	return t
}

func (t *ticker) draw(frame int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	fmt.Fprintf(t.w, "\r\033[K%s", t.line(time.Since(t.start), frame))
}

// Stop ends the ticker, leaving final (if any) on its line.
func (t *ticker) Stop(final string) {
	close(t.stop)
	<-t.done
	if final != "" {
		fmt.Fprintf(t.w, "\r\033[K%s\n", final)
	} else {
		fmt.Fprint(t.w, "\r\033[K")
	}
}

var spinnerFrames = []rune("⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏")

// spinner shows what is awaited and for how long.
func spinner(w io.Writer, what string) *ticker {
	return startTicker(w, func(elapsed time.Duration, frame int) string {
		return fmt.Sprintf("%c %s %.1fs", spinnerFrames[frame%len(spinnerFrames)], what, elapsed.Seconds())
	})
}

// progressThreshold: copies smaller than this finish too fast for a bar to
// tell anyone anything.
const progressThreshold = 1 << 20

// transfer counts bytes for a progress bar; total 0 is unknown.
type transfer struct {
	mu    sync.Mutex
	n     int64
	total int64
}

func (p *transfer) set(n int64) {
	p.mu.Lock()
	p.n = n
	p.mu.Unlock()
}

func (p *transfer) Write(b []byte) (int, error) {
	p.mu.Lock()
	p.n += int64(len(b))
	p.mu.Unlock()
	return len(b), nil
}

func (p *transfer) get() (int64, int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n, p.total
}

// progressBar draws a transfer: a bar and a percentage when the size is
// known, the bytes and the rate always.
func progressBar(w io.Writer, what string, p *transfer) *ticker {
	return startTicker(w, func(elapsed time.Duration, _ int) string {
		n, total := p.get()
		rate := float64(n) / max(elapsed.Seconds(), 0.001)
		if total <= 0 {
			return fmt.Sprintf("%s %s  %s/s", what, humanBytes(n), humanBytes(int64(rate)))
		}
		const width = 30
		filled := int(float64(width) * float64(n) / float64(total))
		filled = min(max(filled, 0), width)
		bar := make([]rune, width)
		for i := range bar {
			bar[i] = '░'
			if i < filled {
				bar[i] = '█'
			}
		}
		return fmt.Sprintf("%s [%s] %3.0f%% %s/%s  %s/s", what, string(bar), 100*float64(n)/float64(total),
			humanBytes(n), humanBytes(total), humanBytes(int64(rate)))
	})
}

func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
