# The diorch image: the same release binary the tests use, on a distroless non-root base.
# Build: docker build -t diorch:0.1.0 .   (no Docker engine runs on the project's machines, so
# this file is kept plain and is not built in CI; tests/operator/deploy.rs checks what it promises).
#
# Base images are pinned by exact tag: the project's machines cannot reach the registries, so
# no digest could be verified here, and none is written down unverified. A release build pins
# both by digest, read from the registry at that time (docs/operations.md, "The image"):
#   docker build --build-arg RUST_IMAGE=rust:1.95.0-bookworm@sha256:<digest> \
#                --build-arg RUNTIME_IMAGE=gcr.io/distroless/cc-debian12:nonroot@sha256:<digest> .
ARG RUST_IMAGE=rust:1.95.0-bookworm
ARG RUNTIME_IMAGE=gcr.io/distroless/cc-debian12:nonroot

FROM ${RUST_IMAGE} AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked --bin diorch \
 && cp target/release/diorch /diorch

# Distroless "cc" (Debian 12, the build stage's glibc): glibc and libgcc_s are the binary's
# only runtime needs (TLS is rustls; certificates come from the cluster). No shell, no package
# manager. UID 65532 is distroless' nonroot user and owns nothing in the image.
FROM ${RUNTIME_IMAGE}
COPY --from=build /diorch /diorch
USER 65532:65532
EXPOSE 8080 8081 8443 9443
ENTRYPOINT ["/diorch"]
CMD ["run", "--leader-elect"]
