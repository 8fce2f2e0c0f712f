#!/usr/bin/env bash
# Installs every Debian 12 package that kvtier's build, tests and `make run` need.
# Idempotent: when every package is already present it does nothing (no apt-get update).
set -euo pipefail

PACKAGES=(
  # toolchain
  cmake ninja-build g++ pkg-config make
  # libraries
  capnproto libcapnp-dev librocksdb-dev libgtest-dev libgmock-dev libbenchmark-dev
  libcli11-dev libspdlog-dev libfmt-dev libyaml-cpp-dev libssl-dev libxxhash-dev
  libhiredis-dev libasio-dev
  # tools used by tests: promtool (prometheus), certificate generation, HTTP probes,
  # Redis (the baseline of `kvtier bench transfer --vs-redis`, started by the bench itself)
  prometheus openssl curl redis-server
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# The prometheus package would start a server from its maintainer scripts where an init
# system runs; policy-rc.d keeps package installs from starting daemons.
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
