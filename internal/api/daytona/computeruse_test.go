package daytona

import (
	"testing"

	"github.com/sandpit-dev/sandpit/internal/desktop"
)

// TestComputerUseKeys: Daytona's key names become the keysyms xdotool
// takes, chords join with "+", and names that are not keys are refused
// before anything runs in the sandbox.
func TestComputerUseKeys(t *testing.T) {
	for _, tc := range []struct {
		keys []string
		want string
		bad  bool
	}{
		{keys: []string{"enter"}, want: "Return"},
		{keys: []string{"ctrl", "shift", "t"}, want: "ctrl+shift+t"},
		{keys: []string{"cmd", "Space"}, want: "super+space"},
		{keys: []string{"F5"}, want: "F5"},
		{keys: []string{"f12"}, want: "F12"},
		{keys: []string{"Page_Down"}, want: "Page_Down"},
		{keys: []string{"é"}, want: "é"},
		{keys: []string{"no such key!"}, bad: true},
		{keys: []string{"a;b"}, bad: true},
		{keys: nil, bad: true},
	} {
		got, err := chord(tc.keys)
		if tc.bad {
			if err == nil {
				t.Errorf("chord(%q) = %q, want an error", tc.keys, got)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("chord(%q) = %q, %v; want %q", tc.keys, got, err, tc.want)
		}
	}
}

// TestComputerUseLocation reads xdotool's --shell output, and refuses
// output without a position.
func TestComputerUseLocation(t *testing.T) {
	got, err := parseLocation([]byte("X=300\nY=400\nSCREEN=0\nWINDOW=123\n"))
	if err != nil || got != (desktop.Position{X: 300, Y: 400}) {
		t.Errorf("parseLocation = %+v, %v", got, err)
	}
	for _, out := range []string{"", "X=1\n", "Can't open display\n"} {
		if _, err := parseLocation([]byte(out)); err == nil {
			t.Errorf("parseLocation(%q): no error", out)
		}
	}
}
