package daytona

import (
	"reflect"
	"strconv"
	"testing"
	"time"
)

func TestParseGitStatus(t *testing.T) {
	out := "# branch.oid 0123\x00# branch.head main\x00# branch.upstream origin/main\x00# branch.ab +2 -1\x00" +
		"1 .M N... 100644 100644 100644 aaaa bbbb README\x00" +
		"1 A. N... 000000 100644 100644 0000 cccc dir/new file.txt\x00" +
		"2 R. N... 100644 100644 100644 dddd dddd R100 new name\x00old name\x00" +
		"u UU N... 100644 100644 100644 100644 e f g conflict.txt\x00" +
		"? untracked\x00"
	got := parseStatus(out)
	want := GitStatus{
		CurrentBranch: "main", Upstream: "origin/main", Ahead: 2, Behind: 1, BranchPublished: true,
		FileStatus: []FileStatus{
			{Name: "README", Staging: "Unmodified", Worktree: "Modified"},
			{Name: "dir/new file.txt", Staging: "Added", Worktree: "Unmodified"},
			{Name: "new name", Staging: "Renamed", Worktree: "Unmodified", Extra: "old name"},
			{Name: "conflict.txt", Staging: "Updated but unmerged", Worktree: "Updated but unmerged"},
			{Name: "untracked", Staging: "Untracked", Worktree: "Untracked"},
		},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("parseStatus:\n got %+v\nwant %+v", got, want)
	}
	if st := parseStatus("# branch.head (detached)\x00"); !st.Detached || len(st.FileStatus) != 0 {
		t.Errorf("detached: %+v", st)
	}
}

func TestSignedPreviewToken(t *testing.T) {
	h := &sandboxAPI{signKey: signingKey([]byte("key-a"))}
	now := time.Unix(1_800_000_000, 0)
	tok := h.signPreview("sbabc-def", 3000, now.Add(time.Minute))
	if id, o := h.verifySigned(3000, tok, now); o != signedValid || id != "sbabc-def" {
		t.Fatalf("valid token: %q %v", id, o)
	}
	other := &sandboxAPI{signKey: signingKey([]byte("key-b"))}
	for name, tc := range map[string]struct {
		h     *sandboxAPI
		port  int
		token string
		at    time.Time
		want  signedOutcome
	}{
		"expired":        {h, 3000, tok, now.Add(2 * time.Minute), signedInvalid},
		"other port":     {h, 3001, tok, now, signedInvalid},
		"other key":      {other, 3000, tok, now, signedInvalid},
		"other sandbox":  {h, 3000, "sbzzz" + tok[len("sbabc-def"):], now, signedInvalid},
		"later expiry":   {h, 3000, "sbabc-def-" + strconv.FormatInt(now.Add(time.Hour).Unix(), 36) + tok[len(tok)-21:], now, signedInvalid},
		"ordinary label": {h, 3000, "sbabc", now, notSigned},
		"dashed id":      {h, 3000, "my-sandbox-id", now, notSigned},
	} {
		if _, o := tc.h.verifySigned(tc.port, tc.token, tc.at); o != tc.want {
			t.Errorf("%s: outcome %v, want %v", name, o, tc.want)
		}
	}
}

func TestCommandLineQuotesOnlyFixedParts(t *testing.T) {
	got := commandLine("/tmp/.daytona/sessions/s1", "abc", false)
	want := "{ command . '/tmp/.daytona/sessions/s1/abc.cmd'; } </dev/null >'/tmp/.daytona/sessions/s1/abc.out' 2>'/tmp/.daytona/sessions/s1/abc.err'; echo $? >'/tmp/.daytona/sessions/s1/abc.x'; mv -f '/tmp/.daytona/sessions/s1/abc.x' '/tmp/.daytona/sessions/s1/abc.exit'\n"
	if got != want {
		t.Errorf("commandLine:\n got %q\nwant %q", got, want)
	}
	if a := commandLine("/d", "c", true); a[:2] != "{ " || a[len(a)-4:] != "} &\n" {
		t.Errorf("async line %q", a)
	}
}
