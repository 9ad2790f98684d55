# Generated protobuf and Connect code is committed; run `make proto` after editing
# any .proto file under proto/ (needs protoc, protoc-gen-go and protoc-gen-connect-go),
# and `make proto-ts` for the TypeScript SDK's copy (buf and protoc-gen-es from npm).
GOBIN_DIR := $(shell go env GOPATH)/bin
MODULE := github.com/sandpit-dev/sandpit
PROTOS := proto/process/process.proto proto/filesystem/filesystem.proto

.PHONY: build install proto proto-ts

build:
	bash scripts/build.sh -o bin/sandpit

# install builds bin/sandpit and puts it on PATH as /usr/local/bin/sandpit
# (SANDPIT_INSTALL_DIR chooses another directory).
install:
	bash scripts/build.sh --install -o bin/sandpit

proto:
	PATH="$(GOBIN_DIR):$$PATH" protoc -I proto \
		--go_out=. --go_opt=module=$(MODULE) \
		--connect-go_out=. --connect-go_opt=module=$(MODULE) \
		$(PROTOS)

proto-ts:
	cd sdk/typescript && npm run generate
