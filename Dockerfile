# The `fence` command in a small image that runs as a non-root user.
#
#   docker build -t fence .
#   docker run --rm fence --help
#
# Both base images are build arguments, so a mirror, a pinned digest or a
# locally made image can stand in for them (the repository's tests use
# local images made by scripts/install/fence-image.sh):
#   docker build --build-arg RUST_IMAGE=... --build-arg RUNTIME_IMAGE=... -t fence .
# The builder needs Rust >= 1.89 and a C compiler; the runtime only glibc.
ARG RUST_IMAGE=rust:1.89-bookworm
ARG RUNTIME_IMAGE=debian:bookworm-slim

FROM ${RUST_IMAGE} AS build
WORKDIR /src
COPY . .
# No debug info in the image's binary; protoc comes from the protoc-bin-vendored
# crate when the builder has none (see .cargo/config.toml).
ENV CARGO_PROFILE_RELEASE_DEBUG=0 \
    CARGO_PROFILE_RELEASE_STRIP=true \
    CARGO_TARGET_DIR=/src/target
RUN cargo build --release --locked -p fencing-cli --bin fence \
 && mkdir -p /out \
 && cp target/release/fence /out/fence

FROM ${RUNTIME_IMAGE}
COPY --from=build /out/fence /usr/local/bin/fence
# A numeric user, so Kubernetes' runAsNonRoot can verify it without /etc/passwd.
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/fence"]
CMD ["--help"]
