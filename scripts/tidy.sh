#!/usr/bin/env bash
# scripts/tidy.sh BUILD_DIR [JOBS]: clang-tidy, with the checks .clang-tidy names, over every
# production source of BUILD_DIR's compile database (tests, benchmarks and test helpers are
# left out) and the headers they include. Exits non-zero, listing each warning once, when
# any check warns; a warning in a header is reported by every file that includes it.
#
# REQUIRES: BUILD_DIR configured by clang with CMAKE_EXPORT_COMPILE_COMMANDS=ON and its
# generated headers made (`make tidy` does both); clang-tidy 14 or later.
set -euo pipefail

build_dir=$(realpath "${1:?usage: scripts/tidy.sh BUILD_DIR [JOBS]}")  # before the cd below
jobs=${2:-$(nproc)}
cd "$(dirname "$0")/.."
db="$build_dir/compile_commands.json"
if [[ ! -f "$db" ]]; then
  echo "tidy: $db is missing: configure $build_dir with -DCMAKE_EXPORT_COMPILE_COMMANDS=ON" >&2
  exit 2
fi
runner=$(command -v run-clang-tidy || command -v run-clang-tidy-14 || true)
if [[ -z "$runner" ]]; then
  echo "tidy: run-clang-tidy is not installed (Debian package clang-tidy)" >&2
  exit 2
fi

# run-clang-tidy matches these as Python regular expressions against each file of the
# database: our .cc files but tests (*_test.cc), benchmarks (*_bench.cc), test helpers
# (testing/) and the PCH stub (cmake/). Cap'n Proto's generated sources end in .c++.
production='^(?!.*/(testing|cmake)/)(?!.*_(test|bench)\.cc$).*\.cc$'

log=$(mktemp)
trap 'rm -f "$log"' EXIT
start=$(date +%s)
status=0
# run-clang-tidy forces colour on; the codes are stripped so that a header's warning,
# reported by each file that includes it, is listed once.
"$runner" -quiet -j "$jobs" -p "$build_dir" "$production" 2>&1 | sed -e 's/\x1b\[[0-9;]*m//g' >"$log" ||
  status=$?
files=$(grep -c '^\(.*/\)\?clang-tidy.* -p=' "$log" || true)
warnings=$(grep -E '(warning|error): ' "$log" | sort -u || true)
echo "tidy: $files files in $(( $(date +%s) - start )) s"
if [[ -n "$warnings" ]]; then
  echo "$warnings"
  echo "tidy: $(echo "$warnings" | wc -l) distinct warnings" >&2
  exit 1
fi
if [[ $status -ne 0 ]]; then  # no warning, yet clang-tidy failed: show why
  tail -n 40 "$log" >&2
  exit "$status"
fi
echo "tidy: clean"
