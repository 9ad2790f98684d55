// Package filesystem is the generated code of the agent's filesystem
// service (filesystem.proto): stat, list, make, move and remove entries and
// watch directories in a sandbox. Its messages follow E2B's "envd" wire
// contract; file contents travel over the agent's plain-HTTP /files
// instead. The .pb.go file is generated (make proto); only this file is
// written by hand.
//
// It imports nothing of the module but generated code.
package filesystem
