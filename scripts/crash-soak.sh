#!/usr/bin/env bash
# Crash soak: the kill -9 tests with many more cycles than CI runs (10 to 20 a case there).
#   storage/disk_tier_crash_test   a process writing (and removing, or from 4 threads) through
#                                  the disk tier
#   store_crash_test               `kvtier store` written to over the network, disk only and
#                                  with a host tier in front
# Usage: scripts/crash-soak.sh [BUILD_DIR] [CYCLES]   (defaults: build 200)
# Prints each test's result and wall time; exits non-zero when any cycle failed.
set -euo pipefail
build=${1:-build}
cycles=${2:-200}
status=0
run() {
  local name=$1 variable=$2 binary=$3
  local start elapsed_ms
  start=$(date +%s%N)
  if env "$variable=$cycles" "$binary" --gtest_brief=1 > "/tmp/crash-soak-$name.log" 2>&1; then
    elapsed_ms=$(( ($(date +%s%N) - start) / 1000000 ))
    printf '%-22s passed, %s cycles per case, %d.%03d s\n' "$name" "$cycles" $((elapsed_ms / 1000)) $((elapsed_ms % 1000))
  else
    printf '%-22s FAILED (log: /tmp/crash-soak-%s.log)\n' "$name" "$name"
    status=1
  fi
}
run disk_tier_crash_test KVTIER_CRASH_CYCLES "$build/storage/disk_tier_crash_test"
run store_crash_test KVTIER_STORE_CRASH_CYCLES "$build/services/store/store_crash_test"
exit $status
