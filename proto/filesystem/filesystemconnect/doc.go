// Package filesystemconnect is the generated Connect client and handler of
// the agent's filesystem service. The agent serves it; the daemon calls it
// through the bounded clients of internal/agentapi. The other file is
// generated (make proto); only this file is written by hand.
//
// It imports nothing of the module but the generated messages of
// proto/filesystem.
package filesystemconnect
