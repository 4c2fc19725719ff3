# shellcheck shell=bash
# The Go settings of every Go program the tests and CI build or vet (sourced):
# the Kubernetes binaries, kind's parts, CloudNativePG, kwok, the interop
# programs and the DatabaseTable example's naming plugin.
#
#   GOTOOLCHAIN=local   the Go installed here; never a toolchain download
#   -mod=mod            go.mod may be completed from the module proxy
#   -buildvcs=false     builds from temporary directories and worktrees
#   -trimpath           no build paths in the binaries
#   -gcflags=all=-dwarf=false -ldflags=-w
#                       no debug information: these are test tools nobody
#                       steps through, and DWARF is a fifth of a cold
#                       build's CPU (kwok v0.8.0 on 2 cores: 201 CPU s with
#                       it, 156 without). A command line's own -ldflags
#                       replaces -w, so those keep a -w of their own.
#   GONOSUMDB           the module proxy serves CloudNativePG's and cnpg-i's
#                       modules, but its checksum database may not answer
#                       for them: go.sum pins their hashes instead
#
# One set of flags for all of them: Go's build cache is keyed by the flags,
# so `go vet`, `go test` and every `go build` share the packages they compile
# (the Kubernetes libraries most of all) instead of compiling each once per
# set of flags. CGO_ENABLED stays each script's choice, except for the two
# modules that require the same cnpg-i, machinery and Kubernetes libraries,
# tests/interop and examples/database-table/plugins/naming: every build, vet
# and test of them is without cgo (.ci/lint.sh, tests/interop/run.sh,
# tests/e2e/cloudnative-pg.sh, the DatabaseTable e2e and image, the Rust
# tests' naming_go), as the naming plugin ships. The cache is keyed by
# CGO_ENABLED too: with cgo in one of them, every package of those libraries
# was compiled twice (the naming plugin's vet and test after its static
# build: 230 CPU seconds with cgo, 113 without).
export GOTOOLCHAIN=local
export GOFLAGS="-mod=mod -buildvcs=false -trimpath -gcflags=all=-dwarf=false -ldflags=-w"
export GONOSUMDB=github.com/cloudnative-pg
