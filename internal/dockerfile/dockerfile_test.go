package dockerfile_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/sandpit-dev/sandpit/internal/dockerfile"
)

func TestParseRefs(t *testing.T) {
	cases := []struct {
		name string
		src  string
		want []string // "KIND image"
	}{
		{"one line", "FROM busybox\nRUN true\n", []string{"FROM busybox"}},
		{"continued FROM", "FROM \\\n  secret/image\nRUN true\n", []string{"FROM secret/image"}},
		{"continued with comment", "FROM \\\n# a comment\n  secret\n", []string{"FROM secret"}},
		{"escape directive", "# escape=`\nFROM `\n  secret\n", []string{"FROM secret"}},
		{"lower case", "from secret\n", []string{"FROM secret"}},
		{"flags before the image", "FROM --platform=linux/amd64 secret AS a\n", []string{"FROM secret"}},
		{"meta arg", "ARG BASE=secret\nFROM ${BASE}\n", []string{"FROM secret"}},
		{"meta arg default form", "ARG X\nFROM ${X:-secret}\n", []string{"FROM secret"}},
		{"meta arg chained", "ARG A=sec\nARG B=${A}ret\nFROM $B\n", []string{"FROM secret"}},
		{"copy from image", "FROM busybox\nCOPY --from=secret /etc/passwd /x\n", []string{"FROM busybox", "COPY --from secret"}},
		{"copy from id prefix", "FROM busybox\nCOPY --from=a2cf /x /x\n", []string{"FROM busybox", "COPY --from a2cf"}},
		{"copy from continued", "FROM busybox\nCOPY \\\n --from=secret /x /x\n", []string{"FROM busybox", "COPY --from secret"}},
		{"copy from stage name", "FROM busybox AS b\nFROM busybox\nCOPY --from=B /x /x\n", []string{"FROM busybox", "FROM busybox"}},
		{"copy from stage index", "FROM busybox\nFROM busybox\nCOPY --from=0 /x /x\n", []string{"FROM busybox", "FROM busybox"}},
		{"copy from own index", "FROM busybox\nCOPY --from=1 /x /x\n", []string{"FROM busybox", "COPY --from 1"}},
		{"copy from later stage", "FROM busybox\nCOPY --from=later /x /x\nFROM busybox AS later\n", []string{"FROM busybox", "COPY --from later", "FROM busybox"}},
		{"from stage", "FROM busybox AS base\nFROM base\n", []string{"FROM busybox"}},
		{"mount from", "FROM busybox\nRUN --mount=type=bind,from=secret,target=/m cat /m/x\n", []string{"FROM busybox", "RUN --mount from secret"}},
		{"mount cache from", "FROM busybox\nRUN --mount=type=cache,from=secret,target=/m true\n", []string{"FROM busybox", "RUN --mount from secret"}},
		{"heredoc", "FROM busybox\nRUN <<EOF\nFROM secret\nEOF\n", []string{"FROM busybox"}},
		{"exec form E2B steps", "FROM busybox\nRUN [\"sh\", \"-c\", \"echo FROM secret\"]\n", []string{"FROM busybox"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f, err := dockerfile.Parse(tc.src)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			var got []string
			for _, r := range f.Refs {
				got = append(got, string(r.Kind)+" "+r.Image)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("refs = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestParseRefuses(t *testing.T) {
	for name, src := range map[string]string{
		"no FROM":             "RUN true\n",
		"unknown instruction": "FROM busybox\nFROBNICATE\n",
		"undefined ARG":       "FROM ${NOPE}\n",
		"ARG after FROM":      "FROM busybox\nARG X=secret\nFROM $X\n",
		"ADD --from":          "FROM busybox\nADD --from=secret /x /x\n",
		"bad escape":          "# escape=x\nFROM busybox\n",
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := dockerfile.Parse(src); !errors.Is(err, dockerfile.ErrInvalid) {
				t.Fatalf("Parse = %v, want ErrInvalid", err)
			}
		})
	}
}

func TestParseFeatures(t *testing.T) {
	f, err := dockerfile.Parse("# syntax=evil/frontend\nFROM busybox\nLABEL a=1 sandpit.pool=x\nONBUILD COPY --from=secret / /\nRUN --network=host true\nRUN --security=insecure true\n")
	if err != nil {
		t.Fatal(err)
	}
	if f.Syntax != "evil/frontend" || f.Onbuild != 4 || !slices.Equal(f.Labels, []string{"a", "sandpit.pool"}) || !slices.Equal(f.RunFlags, []int{5, 6}) {
		t.Fatalf("got syntax %q onbuild %d labels %q run flags %v", f.Syntax, f.Onbuild, f.Labels, f.RunFlags)
	}
}

func TestIsImageID(t *testing.T) {
	for ref, want := range map[string]bool{
		"busybox": false, "sandpit/base:latest": false, "registry:5000/x/y:1": false,
		"a2cf": true, "A2CF": true, "sha256:a2cf": true, "busybox@sha256:0123": true, "0": true,
		"deadbeefcafe": true,
	} {
		if got := dockerfile.IsImageID(ref); got != want {
			t.Errorf("IsImageID(%q) = %v, want %v", ref, got, want)
		}
	}
}
