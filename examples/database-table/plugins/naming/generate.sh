#!/usr/bin/env bash
# Regenerates internal/registrationpb/ (the Go messages and gRPC stubs of
# cnpgi.registration.v1) from the repository's
# proto/registration/v1/registration.proto. The generated files are committed:
# building the plugin needs neither protoc nor this script.
#
#   ./generate.sh        (or: go generate ./...)
#
# Needs python3 with grpcio-tools (its protoc) and the two generators at the
# versions cnpg-i v0.6.0 was generated with, on PATH ($(go env GOPATH)/bin):
#   go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.11
#   go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.2
# PROTO_DIR overrides where proto/ is (default: the repository's).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
proto=${PROTO_DIR:-$here/../../../../proto}
module=github.com/cnpgi-rs/cnpgi-rs/examples/database-table/plugins/naming
file=registration/v1/registration.proto
mapping="M$file=$module/internal/registrationpb;registrationpb"
PATH=$PATH:$(go env GOPATH)/bin
for tool in protoc-gen-go protoc-gen-go-grpc; do
  command -v "$tool" >/dev/null || { echo "generate.sh: $tool is not on PATH: see the go install lines at the top of $0" >&2; exit 1; }
done
[ -f "$proto/$file" ] || { echo "generate.sh: no $proto/$file (set PROTO_DIR to the repository's proto/)" >&2; exit 1; }
python3 -m grpc_tools.protoc -I"$proto" \
  --plugin=protoc-gen-go="$(command -v protoc-gen-go)" \
  --plugin=protoc-gen-go-grpc="$(command -v protoc-gen-go-grpc)" \
  --go_out="$here" --go_opt=module="$module" --go_opt="$mapping" \
  --go-grpc_out="$here" --go-grpc_opt=module="$module" --go-grpc_opt="$mapping" \
  "$file"
