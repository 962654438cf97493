# syntax=docker/dockerfile:1
# pgfleet runtime image: pgfleet and pgfleet-controller on Debian 12 slim.
#
#   scripts/build-image.sh                       # podman, from a Debian base made locally
#   docker build -t pgfleet/pgfleet:0.1.0 .      # where Docker and a registry are at hand
#
# The build stage runs the same scripts as CI (scripts/install-deps.sh --build-only,
# scripts/build.sh), so the image holds what CI built and tested. With
# `--build-arg BINARIES=prebuilt`, the programs are those scripts/build-image.sh --prebuilt DIR put
# in .image-bin/ (CI's own build, tested just before) and nothing is compiled. (An ARG in FROM
# would choose a stage, but buildah's unused-stage skipping does not follow it.) The runtime
# stage has only the programs, the Debian packages of the shared libraries they link, and a
# non-root user. No HEALTHCHECK: Kubernetes probes /healthz and /readyz on the metrics port
# (9127). The same image runs the controller: `--entrypoint pgfleet-controller`.
FROM debian:12 AS build
ARG BINARIES=build
WORKDIR /src
COPY scripts/install-deps.sh scripts/install-deps.sh
RUN if [ "$BINARIES" = build ]; then scripts/install-deps.sh --build-only; fi
COPY . .
RUN mkdir -p /out \
 && if [ "$BINARIES" = prebuilt ]; then \
      install -m 0755 .image-bin/* /out/; \
    else \
      BUILD_DIR=/tmp/build scripts/build.sh \
      && for dir in /tmp/build/cmd/*/; do \
           name=$(basename "$dir"); \
           if [ -x "$dir$name" ]; then install -m 0755 "$dir$name" /out/; fi; \
         done; \
    fi \
 && ls -l /out

FROM debian:12-slim
ARG DEBIAN_FRONTEND=noninteractive
# The shared libraries of the programs (tests/helm/run.sh checks this list against ldd of the
# built binary). libc6, libstdc++6 and libgcc-s1 come with the base image.
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      ca-certificates \
      libabsl20220623 \
      libgrpc++1.51 \
      libprotobuf32 \
      libyaml-cpp0.7 \
      libprometheus-cpp-core1.0 \
      libprometheus-cpp-pull1.0 \
      libssl3 \
      libpq5 \
 && rm -rf /var/lib/apt/lists/*
RUN groupadd --system --gid 65532 pgfleet \
 && useradd --system --uid 65532 --gid 65532 --home-dir /nonexistent --no-create-home \
      --shell /usr/sbin/nologin pgfleet \
 && install -d -o 65532 -g 65532 -m 0750 /run/pgfleet \
 && install -d -m 0755 /etc/pgfleet
COPY --from=build /out/ /usr/local/bin/
USER 65532:65532
ENV TMPDIR=/run/pgfleet
# 6432: PostgreSQL clients; 9127: /metrics, /healthz, /readyz; 9128: peering; 9130: controller.
EXPOSE 6432 9127 9128 9130
ENTRYPOINT ["pgfleet"]
CMD ["--config", "/etc/pgfleet/pgfleet.yaml"]
