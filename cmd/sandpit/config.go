package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"
)

// defaultConfigFile is the configuration serve reads when --config is not
// given and the file exists: the place `sandpit install` writes it.
const defaultConfigFile = "/etc/sandpit/sandpit.yaml"

// applyConfig sets serve's flags from the YAML file at path: each key is a
// flag's name (listen, data-dir, warm-pool, ...), each value a scalar or,
// for a repeatable flag, a list. A flag given on the command line keeps its
// value, and so does one whose environment variable (SANDPIT_<NAME>) gave
// its default: flags, then the environment, then the file, then the
// built-in defaults. A missing file is an error only when named explicitly;
// an unknown key, or a value the flag refuses, is always one, so that a typo
// is not silently ignored.
func applyConfig(flags *pflag.FlagSet, path string, explicit bool) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		if !explicit && errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("config: %w", err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		return fmt.Errorf("config %s: %w", path, err)
	}
	keys := make([]string, 0, len(doc))
	for k := range doc {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, key := range keys {
		f := flags.Lookup(key)
		if f == nil || key == "config" {
			return fmt.Errorf("config %s: unknown key %q (the keys are serve's flag names, see sandpit serve --help)", path, key)
		}
		if f.Changed || fromEnv(f) {
			continue
		}
		values, err := configValues(doc[key], isList(f))
		if err != nil {
			return fmt.Errorf("config %s: %s: %w", path, key, err)
		}
		for _, v := range values {
			if err := f.Value.Set(v); err != nil {
				return fmt.Errorf("config %s: %s: %w", path, key, err)
			}
		}
		// Marked as changed, as a command-line flag would be, for the
		// checks that ask whether a flag was given (cluster flags need
		// --cluster).
		f.Changed = true
	}
	return nil
}

// fromEnv reports whether f's environment variable gave its default.
func fromEnv(f *pflag.Flag) bool {
	v, ok := os.LookupEnv("SANDPIT_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_")))
	return ok && v != "" && v == f.DefValue
}

func isList(f *pflag.Flag) bool {
	t := f.Value.Type()
	return strings.HasSuffix(t, "Array") || strings.HasSuffix(t, "Slice")
}

// configValues is a YAML value as the strings a flag's Set takes.
func configValues(v any, list bool) ([]string, error) {
	if items, ok := v.([]any); ok {
		if !list {
			return nil, errors.New("a list for a flag that takes one value")
		}
		out := make([]string, 0, len(items))
		for _, it := range items {
			s, err := scalar(it)
			if err != nil {
				return nil, err
			}
			out = append(out, s)
		}
		return out, nil
	}
	s, err := scalar(v)
	if err != nil {
		return nil, err
	}
	return []string{s}, nil
}

func scalar(v any) (string, error) {
	switch x := v.(type) {
	case string:
		return x, nil
	case bool:
		return strconv.FormatBool(x), nil
	case int:
		return strconv.Itoa(x), nil
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64), nil
	case nil:
		return "", errors.New("no value")
	}
	return "", fmt.Errorf("a %T where a single value goes", v)
}
