# Builds one workspace binary into a minimal, non-root image:
#   docker build --build-arg BIN=cnpgi-operator -t cnpgi-operator:dev .
#   docker build --build-arg BIN=cnpg-i-hello-world -t cnpg-i-hello-world:dev .

ARG RUST_VERSION=1.89

FROM rust:${RUST_VERSION}-bookworm AS build
ARG BIN=cnpgi-operator
WORKDIR /src
COPY . .
# Cargo's registry and the target directory live in BuildKit caches, so a
# rebuild after a source change only recompiles the workspace crates.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/usr/local/cargo/git \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin "${BIN}" \
    && mkdir -p /out \
    && cp "target/release/${BIN}" "/out/${BIN}" \
    && ln -s "${BIN}" /out/entrypoint

# glibc, CA certificates and nothing else; runs as uid 65532.
FROM gcr.io/distroless/cc-debian12:nonroot
ARG BIN=cnpgi-operator
LABEL org.opencontainers.image.title="${BIN}" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /out/ /usr/local/bin/
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/entrypoint"]
