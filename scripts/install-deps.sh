#!/usr/bin/env bash
# Installs every Debian 12 package that kvtier's build, tests and `make run` need.
# Idempotent: when every package is already present it installs nothing (no apt-get update).
set -euo pipefail

PACKAGES=(
  # toolchain
  cmake ninja-build g++ pkg-config make
  # the ASan tree's compiler (its -Wthread-safety checks the locking) and its sanitizer runtimes
  clang libclang-rt-14-dev
  # `make tidy` (scripts/tidy.sh)
  clang-tidy
  # libraries
  capnproto libcapnp-dev librocksdb-dev libgtest-dev libgmock-dev libbenchmark-dev
  libcli11-dev libspdlog-dev libfmt-dev libyaml-cpp-dev libssl-dev libxxhash-dev
  libhiredis-dev libasio-dev
  # engines' KV event streams (ZMQ + msgpack), and the publishers the tests run
  libzmq3-dev cppzmq-dev libmsgpack-cxx-dev python3-zmq python3-msgpack
  # the Python binding of the client SDK (services/client/python)
  pybind11-dev python3-dev
  # its wheel is tested installed into a fresh virtual environment (tests/python/wheel_test.py)
  python3-venv
  # tools used by tests: promtool (prometheus), certificate generation, HTTP probes,
  # Redis (the baseline of `kvtier bench transfer --vs-redis`, started by the bench itself)
  prometheus openssl curl redis-server
  # the cluster test puts each node in a network namespace of its own (ip netns, as root)
  iproute2
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done

# Node.js runs the manifest validator (deploy/validate). A machine may have Node from
# elsewhere (whose nodejs package bundles npm and conflicts with Debian's npm): only when
# the commands are missing are Debian's packages installed.
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  missing+=(nodejs npm)
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  # The prometheus package would start a server from its maintainer scripts where an init
  # system runs; policy-rc.d keeps package installs from starting daemons.
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# The validator's npm packages, pinned by deploy/validate/package-lock.json; reinstalled
# when the lock file changes.
validate_dir="$(dirname "$0")/../deploy/validate"
stamp="$validate_dir/node_modules/.kvtier-lock"
if ! cmp -s "$validate_dir/package-lock.json" "$stamp" 2>/dev/null; then
  echo "install-deps: npm ci in deploy/validate"
  (cd "$validate_dir" && npm ci --no-audit --no-fund --loglevel=error)
  cp "$validate_dir/package-lock.json" "$stamp"
fi

# kubectl (which renders deploy/k8s offline) is not a Debian package; the machines this
# project runs on have it. Say so early rather than fail in the tests.
if ! command -v kubectl >/dev/null; then
  echo "install-deps: warning: kubectl is not installed; the deploy/k8s rendering tests will fail" >&2
fi
