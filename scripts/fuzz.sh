#!/usr/bin/env bash
# scripts/fuzz.sh BUILD_DIR [SECONDS]: runs every libFuzzer program of BUILD_DIR/fuzz for
# SECONDS each (default 60), starting from its seeds in tests/fuzz/<name>/. New inputs that
# reach new code go to BUILD_DIR/fuzz-corpus/<name>/ (the checked-in seeds are never
# written), so a later run goes on from them. Exits non-zero when a program crashed or
# a property failed, naming the input that did it (BUILD_DIR/fuzz-crashes/): replay it with
# `BUILD_DIR/fuzz/<name> FILE`, and add it to the seeds once fixed.
#
# REQUIRES: BUILD_DIR configured with clang, -DKVTIER_FUZZ=ON -DKVTIER_SANITIZE=ON, and its
# kvtier_fuzzers target built (`make fuzz` does both).
set -uo pipefail

build_dir=$(realpath "${1:?usage: scripts/fuzz.sh BUILD_DIR [SECONDS]}")
seconds=${2:-60}
root=$(cd "$(dirname "$0")/.." && pwd)
shopt -s nullglob
programs=("$build_dir"/fuzz/*_fuzz)
if (( ${#programs[@]} == 0 )); then
  echo "fuzz: no fuzz programs in $build_dir/fuzz: build its kvtier_fuzzers target" >&2
  exit 2
fi

failed=()
for program in "${programs[@]}"; do
  name=$(basename "$program")
  corpus="$build_dir/fuzz-corpus/$name"
  crashes="$build_dir/fuzz-crashes/$name-"
  mkdir -p "$corpus" "$build_dir/fuzz-crashes"
  log="$build_dir/fuzz-crashes/$name.log"
  # One process: a crash ends the run with the input saved under $crashes.
  if "$program" -max_total_time="$seconds" -print_final_stats=1 -artifact_prefix="$crashes" \
      "$corpus" "$root/tests/fuzz/$name" > "$log" 2>&1; then
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    printf 'ok     %-20s %s inputs in %s s, corpus %s files\n' "$name" "${runs:-?}" "$seconds" \
      "$(find "$corpus" -type f | wc -l)"
  else
    printf 'FAILED %-20s %s (log: %s)\n' "$name" "$(ls "$crashes"* 2>/dev/null | head -1)" "$log"
    failed+=("$name")
  fi
done
if (( ${#failed[@]} > 0 )); then
  echo "fuzz: ${#failed[@]} of ${#programs[@]} programs failed: ${failed[*]}"
  exit 1
fi
echo "fuzz: ${#programs[@]} programs ran ${seconds} s each with every property holding"
