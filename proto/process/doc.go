// Package process is the generated code of the agent's process service
// (process.proto): starting, listing, connecting to and signalling the
// processes of a sandbox. Its messages follow E2B's "envd" wire contract so
// that the official E2B SDKs drive Sandpit's agent unmodified. The .pb.go
// file is generated (make proto); only this file is written by hand.
//
// It imports nothing of the module but generated code.
package process
