package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// configValue is a value for a flag of type typ in a config file, and what
// the flag reads back once it is set from it.
func configValue(t *testing.T, f *pflag.Flag) (yamlValue, want string) {
	switch f.Value.Type() {
	case "string":
		return fmt.Sprintf("%q", "from-config-"+f.Name), "from-config-" + f.Name
	case "bool":
		if f.DefValue == "true" {
			return "false", "false"
		}
		return "true", "true"
	case "duration":
		return "17s", "17s"
	case "int", "int64":
		return "17", "17"
	case "float64":
		return "1.5", "1.5"
	case "stringArray":
		return `["a=1", "b=2"]`, "[a=1,b=2]"
	case "stringSlice":
		return `["x:1", "y:2"]`, "[x:1,y:2]"
	}
	t.Fatalf("flag --%s has type %s, which the config test does not know", f.Name, f.Value.Type())
	return "", ""
}

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "sandpit.yaml")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// Every flag of serve is a key of the config file, and sets the flag.
func TestConfigHonoursEveryKey(t *testing.T) {
	// The file is what this test reads, and a flag's environment variable
	// wins over it: the environment must say nothing here (the test runner
	// sets SANDPIT_WARM_POOL_AUTO for the daemons of the other suites).
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "SANDPIT_") {
			t.Setenv(k, "")
		}
	}
	flags := serveCmd().Flags()
	var body strings.Builder
	want := map[string]string{}
	flags.VisitAll(func(f *pflag.Flag) {
		if f.Name == "config" || f.Name == "help" {
			return
		}
		v, w := configValue(t, f)
		fmt.Fprintf(&body, "%s: %s\n", f.Name, v)
		want[f.Name] = w
	})
	if len(want) < 60 {
		t.Fatalf("only %d flags seen", len(want))
	}
	if err := applyConfig(flags, writeConfig(t, body.String()), true); err != nil {
		t.Fatal(err)
	}
	for name, w := range want {
		t.Run(name, func(t *testing.T) {
			if got := flags.Lookup(name).Value.String(); got != w {
				t.Fatalf("--%s = %q after the config, want %q", name, got, w)
			}
		})
	}
}

// A flag on the command line, and a flag's environment variable, win over
// the file; what the file cannot mean is refused.
func TestConfigPrecedenceAndRefusals(t *testing.T) {
	t.Run("the command line wins", func(t *testing.T) {
		cmd := serveCmd()
		if err := cmd.Flags().Parse([]string{"--listen", "127.0.0.1:1111"}); err != nil {
			t.Fatal(err)
		}
		if err := applyConfig(cmd.Flags(), writeConfig(t, "listen: 127.0.0.1:2222\ndomain: from.config\n"), true); err != nil {
			t.Fatal(err)
		}
		if got := cmd.Flags().Lookup("listen").Value.String(); got != "127.0.0.1:1111" {
			t.Fatalf("listen = %s, want the command line's", got)
		}
		if got := cmd.Flags().Lookup("domain").Value.String(); got != "from.config" {
			t.Fatalf("domain = %s, want the file's", got)
		}
	})
	t.Run("the environment wins", func(t *testing.T) {
		t.Setenv("SANDPIT_LISTEN", "127.0.0.1:3333")
		cmd := serveCmd()
		if err := applyConfig(cmd.Flags(), writeConfig(t, "listen: 127.0.0.1:2222\n"), true); err != nil {
			t.Fatal(err)
		}
		if got := cmd.Flags().Lookup("listen").Value.String(); got != "127.0.0.1:3333" {
			t.Fatalf("listen = %s, want the environment's", got)
		}
	})
	t.Run("a missing default file is no error", func(t *testing.T) {
		if err := applyConfig(serveCmd().Flags(), filepath.Join(t.TempDir(), "none.yaml"), false); err != nil {
			t.Fatal(err)
		}
	})
	for _, tc := range []struct{ name, body, want string }{
		{"unknown key", "lisen: 127.0.0.1:1\n", `unknown key "lisen"`},
		{"a list for one value", "listen: [a, b]\n", "a list for a flag that takes one value"},
		{"a value the flag refuses", "engine-timeout: soon\n", "engine-timeout"},
		{"not a mapping", "- listen\n", "cannot unmarshal"},
		{"the config names itself", "config: other.yaml\n", `unknown key "config"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := applyConfig(serveCmd().Flags(), writeConfig(t, tc.body), true)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to say %q", err, tc.want)
			}
		})
	}
	t.Run("a missing named file is an error", func(t *testing.T) {
		if err := applyConfig(serveCmd().Flags(), filepath.Join(t.TempDir(), "none.yaml"), true); err == nil {
			t.Fatal("no error")
		}
	})
}
