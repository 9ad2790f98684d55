package sshd

import "testing"

// TestSignalOf: the agent's status of a process ended by a signal becomes
// the signal's SSH name.
func TestSignalOf(t *testing.T) {
	for _, c := range []struct {
		status, signal string
		core           bool
	}{
		{"signal: killed", "KILL", false},
		{"signal: terminated", "TERM", false},
		{"signal: interrupt", "INT", false},
		{"signal: segmentation fault (core dumped)", "SEGV", true},
		{"exit status 3", "", false},
		{"signal: no such signal", "", false},
	} {
		sig, core := signalOf(c.status)
		if sig != c.signal || core != c.core {
			t.Errorf("signalOf(%q) = %q %v, want %q %v", c.status, sig, core, c.signal, c.core)
		}
	}
}
