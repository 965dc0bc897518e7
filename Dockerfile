# The diorch image: the same release binary the tests use, on a small non-root base.
# Build: docker build -t diorch:0.1.0 .   (no Docker engine runs on the project's machines, so
# this file is kept plain and is not built in CI; see docs/operations.md).

FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked --bin diorch \
 && cp target/release/diorch /diorch

# A slim base with glibc (the binary's only runtime need: TLS is rustls, certificates come from
# the cluster); runs as UID 65532, which owns nothing in the image.
FROM debian:bookworm-slim
COPY --from=build /diorch /diorch
USER 65532:65532
EXPOSE 8080 8081 8443 9443
ENTRYPOINT ["/diorch"]
CMD ["run", "--leader-elect"]
