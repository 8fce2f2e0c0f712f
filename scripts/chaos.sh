#!/usr/bin/env bash
# The chaos soak, long: a coordinator, two workers and a store as processes under a
# multi-client load while nodes are SIGKILLed and restarted, the store's disk is filled
# and freed, and clients drop connections (tests/chaos/chaos.py says what it checks).
# Prints the JSON report; exits 1 when a goal is missed. Root mounts the store's disk as
# a small tmpfs (needed for the disk fills).
#   scripts/chaos.sh [BUILD_DIR] [-- chaos.py flags]   default: 600 s, 4 clients
set -euo pipefail
cd "$(dirname "$0")/.."
build=build
if [[ $# -gt 0 && $1 != -- ]]; then build=$1; shift; fi
[[ ${1:-} == -- ]] && shift
export PYTHONPATH="$build/python" KVTIER_BIN="$build/bin/kvtier"
exec python3 tests/chaos/chaos.py --seconds 600 --clients 4 "$@"
