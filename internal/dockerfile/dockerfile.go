// Package dockerfile reads a Dockerfile with BuildKit's own parser and names
// every image it would make the engine read: each FROM, each COPY --from,
// each RUN --mount from=. A template build runs a tenant's Dockerfile on the
// shared engine, so what the engine would read is decided here, with the
// grammar the engine itself uses (line continuations, the escape directive,
// heredocs, ARG expansion), never with a line-by-line guess.
package dockerfile

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/buildkit/frontend/dockerfile/parser"
	"github.com/moby/buildkit/frontend/dockerfile/shell"
)

// ErrInvalid marks a Dockerfile the parser refuses, or one that uses a
// feature a tenant's build may not use.
var ErrInvalid = errors.New("invalid Dockerfile")

// RefKind says where a Dockerfile names an image.
type RefKind string

// The places an image can be named.
const (
	RefFrom      RefKind = "FROM"
	RefCopyFrom  RefKind = "COPY --from"
	RefMountFrom RefKind = "RUN --mount from"
)

// Ref is one image the build would read. A reference to an earlier stage
// of the same Dockerfile is not a Ref: it reads nothing from the engine.
type Ref struct {
	Kind RefKind
	// Image is the reference as the engine would see it, after ARG
	// expansion.
	Image string
	Line  int
}

// File is what a Dockerfile would make the engine do that a build policy
// cares about.
type File struct {
	// Refs are the images the build reads, in order.
	Refs []Ref
	// Labels are the keys of every LABEL instruction.
	Labels []string
	// Onbuild is the line of the first ONBUILD instruction (0: none). An
	// ONBUILD trigger runs in the build of whatever image starts FROM this
	// one, unchecked by that build's own reading, so a policy refuses it.
	Onbuild int
	// Syntax is the `# syntax=` directive ("" if none): with BuildKit it
	// names an image to run as the frontend.
	Syntax string
	// RunFlags are the lines of RUN instructions that ask for a network
	// mode, a security mode or a device (BuildKit's entitlements).
	RunFlags []int
}

// Parse reads src. A Dockerfile the parser refuses wraps ErrInvalid with
// the parser's words.
func Parse(src string) (File, error) {
	res, err := parser.Parse(strings.NewReader(src))
	if err != nil {
		return File{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	var f File
	if syntax, _, _, ok := parser.DetectSyntax([]byte(src)); ok {
		f.Syntax = syntax
	}
	lex := shell.NewLex(res.EscapeToken)
	meta := argEnv{}
	var stages []string // the names of the stages so far, lower case
	for _, node := range res.AST.Children {
		cmd, err := instructions.ParseInstruction(node)
		if err != nil {
			return File{}, fmt.Errorf("%w: line %d: %v", ErrInvalid, node.StartLine, err)
		}
		switch c := cmd.(type) {
		case *instructions.ArgCommand:
			if len(stages) == 0 {
				// An ARG before the first FROM is a meta argument, the
				// only variables a FROM line expands. Builds take no
				// build arguments, so each has its default.
				for _, kv := range c.Args {
					v := ""
					if kv.Value != nil {
						if v, err = expand(lex, *kv.Value, meta); err != nil {
							return File{}, fmt.Errorf("%w: line %d: %v", ErrInvalid, node.StartLine, err)
						}
					}
					meta[kv.Key] = v
				}
			}
		case *instructions.Stage:
			base, err := expand(lex, c.BaseName, meta)
			if err != nil {
				return File{}, fmt.Errorf("%w: line %d: %v", ErrInvalid, node.StartLine, err)
			}
			if !slices.Contains(stages, strings.ToLower(base)) {
				f.Refs = append(f.Refs, Ref{Kind: RefFrom, Image: base, Line: node.StartLine})
			}
			stages = append(stages, strings.ToLower(c.Name))
		case *instructions.CopyCommand:
			if c.From != "" {
				if ref, ok := imageRef(c.From, stages); ok {
					f.Refs = append(f.Refs, Ref{Kind: RefCopyFrom, Image: ref, Line: node.StartLine})
				}
			}
		case *instructions.RunCommand:
			for _, m := range instructions.GetMounts(c) {
				if m.From != "" {
					if ref, ok := imageRef(m.From, stages); ok {
						f.Refs = append(f.Refs, Ref{Kind: RefMountFrom, Image: ref, Line: node.StartLine})
					}
				}
			}
			if instructions.GetNetwork(c) != instructions.NetworkDefault || instructions.GetSecurity(c) == instructions.SecurityInsecure || len(instructions.GetDevices(c)) > 0 {
				f.RunFlags = append(f.RunFlags, node.StartLine)
			}
		case *instructions.LabelCommand:
			for _, kv := range c.Labels {
				f.Labels = append(f.Labels, kv.Key)
			}
		case *instructions.OnbuildCommand:
			if f.Onbuild == 0 {
				f.Onbuild = node.StartLine
			}
		}
	}
	if len(stages) == 0 {
		return File{}, fmt.Errorf("%w: no FROM instruction", ErrInvalid)
	}
	return f, nil
}

// imageRef tells an image from an earlier stage in a --from value: a stage
// is named by its name or its index among the stages before this one. A
// number that is not such an index is not a stage, and the engine would
// read it as an image (an ID prefix), so it is returned as one.
func imageRef(from string, stages []string) (string, bool) {
	lower := strings.ToLower(from)
	if slices.Contains(stages, lower) && lower != "" {
		return "", false
	}
	if i, err := strconv.Atoi(from); err == nil && i >= 0 && i < len(stages) {
		return "", false
	}
	return from, true
}

// expand expands a word with the meta arguments. A variable without a
// value is an error rather than an empty string, so that what the policy
// checks is never less than what the engine would read.
func expand(lex *shell.Lex, word string, env argEnv) (string, error) {
	out, unmatched, err := lex.ProcessWord(word, env)
	if err != nil {
		return "", err
	}
	if len(unmatched) > 0 {
		names := make([]string, 0, len(unmatched))
		for n := range unmatched {
			names = append(names, n)
		}
		slices.Sort(names)
		return "", fmt.Errorf("%q names %s, which no ARG before the first FROM defines", word, strings.Join(names, ", "))
	}
	return out, nil
}

type argEnv map[string]string

func (e argEnv) Get(k string) (string, bool) { v, ok := e[k]; return v, ok }

func (e argEnv) Keys() []string {
	keys := make([]string, 0, len(e))
	for k := range e {
		keys = append(keys, k)
	}
	return keys
}

// hexRE matches what the engine may take for an image ID or an ID prefix.
var hexRE = regexp.MustCompile(`^(sha256:)?[0-9a-fA-F]+$`)

// IsImageID reports whether ref names an image by content rather than by
// name: a full or partial ID (with or without "sha256:") or a digest
// ("name@sha256:..."). The engine resolves these against every image it
// holds, whoever made it.
func IsImageID(ref string) bool {
	return hexRE.MatchString(ref) || strings.Contains(ref, "@") || strings.HasPrefix(strings.ToLower(ref), "sha256:")
}
