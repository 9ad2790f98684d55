package daytona

import (
	"reflect"
	"strconv"
	"testing"
)

func frame(body string) string {
	return "Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
}

// TestLSPFramesResynchronise feeds the reassembler what a call can see when
// it attaches to a server in the middle of a message: it must still find
// every whole message after that, or the call waits out its bound for an
// answer that already came.
func TestLSPFramesResynchronise(t *testing.T) {
	answer := `{"jsonrpc":"2.0","id":"7","result":[]}`
	diag := `{"jsonrpc":"2.0","method":"textDocument/publishDiagnostics","params":{"uri":"file:///a.ts","diagnostics":[]}}`
	quoting := `{"jsonrpc":"2.0","method":"window/logMessage","params":{"message":"Content-Length: 3"}}`
	tests := []struct {
		name   string
		chunks []string
		want   []string
	}{
		{"whole messages", []string{frame(diag) + frame(answer)}, []string{diag, answer}},
		{"split anywhere", []string{frame(answer)[:5], frame(answer)[5:30], frame(answer)[30:]}, []string{answer}},
		{"a body whose header came before the attach", []string{diag, frame(answer)}, []string{answer}},
		{"a body and the next header in one chunk", []string{diag + frame(answer)}, []string{answer}},
		{"the tail of a header", []string{frame(diag)[6:] + frame(answer)}, []string{answer}},
		{"a tail that quotes header text", []string{quoting[10:], frame(answer)}, []string{answer}},
		{"a content type before the length", []string{diag[20:] + "Content-Type: application/vscode-jsonrpc; charset=utf-8\r\n" + frame(answer)}, []string{answer}},
		{"a header with no length", []string{"Content-Type: x\r\n\r\n" + frame(answer)}, []string{answer}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var f lspFrames
			var got []string
			for _, c := range tt.chunks {
				f.add([]byte(c))
				for {
					m, ok := f.next()
					if !ok {
						break
					}
					got = append(got, string(m))
				}
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got %q, want %q", got, tt.want)
			}
		})
	}
}
