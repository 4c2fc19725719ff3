# Builds one of the workspace's binaries into a minimal, non-root image:
#   docker build --build-arg BIN=cnpgi-operator -t cnpgi-operator:dev .
#   docker build --build-arg BIN=cnpg-i-hello-world -t cnpg-i-hello-world:dev .
#   docker build --build-arg BIN=cnpgi-wal-archive -t cnpgi-wal-archive:dev .
#   docker build --build-arg BIN=database-table-operator -t database-table-operator:dev .
#   docker build --build-arg BIN=database-table-postgres -t database-table-postgres:dev .
#
# The build stage does not depend on BIN: it compiles every binary of BINS in
# one cargo invocation, so the first image pays for the shared dependencies
# once and the next ones reuse the cached stage (no second compile).
#   BINS           the binaries the build stage compiles (default: the
#                  images the project ships, and the DatabaseTable example's
#                  operator and PostgreSQL plugin); a user building one image only
#                  may narrow it: --build-arg BINS=cnpgi-wal-archive
#   CARGO_PROFILE  release (default: thin LTO, one codegen unit, stripped);
#                  the project's tests build with `dev`, which compiles in a
#                  fraction of the time (no release builds in tests)
#   BUILD          source (default): the build stage compiles the binaries;
#                  prebuilt: they come from the context's .prebuilt/ directory,
#                  binaries a `cargo build` outside Docker made, staged by
#                  `task prebuilt` (`task images PREBUILT=target/debug` does
#                  both). The quick inner loop, and .ci/run's kind images (the
#                  binaries its suites built): no second compile of the
#                  workspace. Such binaries need a glibc no newer than the
#                  runtime base's (Debian 12's 2.36); the task checks.

ARG RUST_VERSION=1.89
ARG BUILD=source

FROM rust:${RUST_VERSION}-bookworm AS build-source
ARG BINS="cnpgi-operator cnpg-i-hello-world cnpgi-wal-archive database-table-operator database-table-postgres"
ARG CARGO_PROFILE=release
WORKDIR /src
COPY . .
# Cargo's registry and the target directory live in BuildKit caches, so a
# rebuild after a source change only recompiles the workspace crates.
# /out/<bin>/ holds the binary and an `entrypoint` link to it, so the final
# stage copies one directory whatever BIN is; cnpgi-operator's also a
# `kubectl-cnpgi` link (the same binary under kubectl's plugin name:
# `kubectl cnpgi doctor` with the image's binary on PATH).
# hadolint ignore=SC2086
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/usr/local/cargo/git \
    --mount=type=cache,target=/src/target \
    set -eu; \
    bin_args=""; for bin in ${BINS}; do bin_args="${bin_args} --bin ${bin}"; done; \
    cargo build --locked --profile "${CARGO_PROFILE}" ${bin_args}; \
    case "${CARGO_PROFILE}" in dev) dir=debug ;; *) dir="${CARGO_PROFILE}" ;; esac; \
    for bin in ${BINS}; do \
      mkdir -p "/out/${bin}"; \
      cp "target/${dir}/${bin}" "/out/${bin}/${bin}"; \
      ln -s "${bin}" "/out/${bin}/entrypoint"; \
      if [ "${bin}" = cnpgi-operator ]; then ln -s "${bin}" "/out/${bin}/kubectl-cnpgi"; fi; \
    done

# The layout of build-source's /out, made by `task prebuilt`. BuildKit builds
# only the stage BUILD names: a prebuilt image needs no Rust image, and a
# source one no .prebuilt/.
FROM scratch AS build-prebuilt
COPY .prebuilt/ /out/

# hadolint ignore=DL3006
FROM build-${BUILD} AS build

# glibc, CA certificates and nothing else; runs as uid 65532.
FROM gcr.io/distroless/cc-debian12:nonroot
ARG BIN=cnpgi-operator
LABEL org.opencontainers.image.title="${BIN}" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /out/${BIN}/ /usr/local/bin/
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/entrypoint"]
