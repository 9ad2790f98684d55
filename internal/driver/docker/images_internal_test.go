package docker

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/sandpit-dev/sandpit/internal/driver"
)

// TestDecodeStreamVanishedImage: an engine build error that names an image
// by id it cannot find is told apart from the user's own build failures,
// which wrap ErrBuildFailed alone.
func TestDecodeStreamVanishedImage(t *testing.T) {
	cases := []struct {
		name     string
		message  string
		vanished bool
	}{
		{"cached step removed", `unable to find image "sha256:a2cf691c4c6b86279ac8931d5968017f7c9bb0e9a5fde43c3c2a285c43714738"`, true},
		{"layer parent removed", "No such image: sha256:a2cf691c4c6b86279ac8931d5968017f7c9bb0e9a5fde43c3c2a285c43714738", true},
		{"missing base by name", `pull access denied for nosuch, repository does not exist or may require 'docker login'`, false},
		{"failing step", "The command '/bin/sh -c exit 7' returned a non-zero code: 7", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			stream := `{"stream":"Step 1/2 : FROM base\n"}` + "\n" + `{"errorDetail":{"message":` + quote(tc.message) + `},"error":` + quote(tc.message) + `}` + "\n"
			var logs strings.Builder
			err := decodeStream(strings.NewReader(stream), &logs, nil)
			if !errors.Is(err, driver.ErrBuildFailed) {
				t.Fatalf("err %v does not wrap ErrBuildFailed", err)
			}
			if got := errors.Is(err, driver.ErrBuildImageVanished); got != tc.vanished {
				t.Errorf("err %v: vanished %v, want %v", err, got, tc.vanished)
			}
			if !strings.Contains(err.Error(), tc.message) || !strings.Contains(logs.String(), "Step 1/2") {
				t.Errorf("err %q / logs %q lack the engine's message or its steps", err, logs.String())
			}
			// The caller logs the reason once, as the build's error entry.
			if strings.Contains(logs.String(), tc.message) {
				t.Errorf("logs %q repeat the error", logs.String())
			}
		})
	}
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
