# Generated protobuf and Connect code is committed; run `make proto` after editing
# any .proto file under proto/ (needs protoc, protoc-gen-go and protoc-gen-connect-go).
GOBIN_DIR := $(shell go env GOPATH)/bin
MODULE := github.com/sandpit-dev/sandpit
PROTOS := proto/process/process.proto proto/filesystem/filesystem.proto

.PHONY: build proto

build:
	CGO_ENABLED=0 go build -o bin/sandpit ./cmd/sandpit

proto:
	PATH="$(GOBIN_DIR):$$PATH" protoc -I proto \
		--go_out=. --go_opt=module=$(MODULE) \
		--connect-go_out=. --connect-go_opt=module=$(MODULE) \
		$(PROTOS)
