package api

import "testing"

func TestTemplateField(t *testing.T) {
	read := TemplateField("template")
	for _, tc := range []struct{ body, want string }{
		{`{"template":"py"}`, "py"},
		{`{"template":"py:v1","name":"x"}`, "py:v1"},
		{`{"template":"py","image":"busybox"}`, ""}, // the image wins over the template
		{`{"image":"busybox"}`, ""},
		{`{"template":7}`, ""},
		{`not json`, ""},
	} {
		if got := read([]byte(tc.body)); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.body, got, tc.want)
		}
	}
}
