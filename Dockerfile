# syntax=docker/dockerfile:1
#
# The mcp-operator image: one static-enough binary on distroless, non-root.
#
#   docker build -t mcp-operator:dev .
#
# The builder's toolchain is pinned (RUST_VERSION); it must be at least Cargo.toml's
# rust-version. Builder and runtime are both Debian 12 (bookworm), so the binary's glibc
# matches the runtime's.

ARG RUST_VERSION=1.95

FROM docker.io/library/rust:${RUST_VERSION}-slim-bookworm AS builder
WORKDIR /build
# Only what the release build reads: the manifest, the lock file, the sources (and the
# schemas the sources may include).
COPY Cargo.toml Cargo.lock ./
COPY src ./src
COPY schemas ./schemas
# The registry and target caches survive between builds (BuildKit); --locked builds exactly
# the checked-in Cargo.lock.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/build/target \
    cargo build --release --locked --bin mcp-operator \
    && install -D -m 0755 target/release/mcp-operator /out/mcp-operator

# glibc, libgcc, CA certificates and a `nonroot` user (65532); no shell, no package manager.
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=builder /out/mcp-operator /mcp-operator
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/mcp-operator"]
CMD ["controller"]
