package harness

import "encoding/json"

// Answer is one raw HTTP answer, kept byte for byte so that replays can be
// compared with the original and every answer counted as the server gave
// it. Err is the transport error of a request that got no answer, for
// tests that send requests through crashes and failovers.
type Answer struct {
	Status   int
	Body     []byte
	Replayed bool // the Idempotent-Replayed header was "true"
	Err      error
}

// Code is the error code of an error answer, or "".
func (a Answer) Code() string {
	var e struct {
		Error struct{ Code string } `json:"error"`
	}
	_ = json.Unmarshal(a.Body, &e)
	return e.Error.Code
}

// ID is the "id" of a sandbox answer, or "".
func (a Answer) ID() string {
	var sb struct{ ID string }
	_ = json.Unmarshal(a.Body, &sb)
	return sb.ID
}
