#!/usr/bin/env bash
# scripts/tsan.sh BUILD_DIR [JOBS]: ThreadSanitizer over the threaded libraries' tests.
# Builds the test programs listed below in BUILD_DIR, runs each one and exits non-zero,
# naming each program and its log, when any test fails or ThreadSanitizer reports a race
# (a report makes the program exit 66 even when its tests pass).
#
# REQUIRES: BUILD_DIR configured with -DKVTIER_TSAN=ON -DKVTIER_CUDA=OFF (`make test-tsan`
# does it).
#
# The list is every test program that starts threads of its own and crosses them only
# through our mutexes, atomics and Asio, none through KJ (a test that starts no thread gives
# ThreadSanitizer nothing to find, and the coordinator is single-threaded by contract).
# Left out, because they hand work across threads through KJ's executor
# (kj::Executor::executeSync/executeAsync) or start a node agent: Debian's libkj is not
# instrumented and signals the waiting thread through a raw futex that ThreadSanitizer does
# not see, so each such hand-off can read as a race (and spdlog's registry, first built on
# an agent's thread inside the uninstrumented libspdlog, as another). That is every RPC test
# (coordinator, worker and store services and nodes, the client, the CLI and cluster
# tests), loop_thread_test, peer_fetcher_test, remote_store_writer_test,
# loop_bound_block_source_test, local_node_test and onboard_allocation_test.
set -uo pipefail

build_dir=${1:?usage: scripts/tsan.sh BUILD_DIR [JOBS]}
jobs=${2:-$(nproc)}

programs=(
  common/mutex_test common/metrics_test common/http_server_test
  storage/format_tag_test storage/header_families_test storage/host_tier_test
  storage/host_tier_eviction_test storage/put_group_queue_test storage/disk_tier_test
  storage/disk_tier_layout_test storage/disk_compaction_test storage/tiered_store_test
  services/worker/worker_storage_test services/worker/device_pool_storage_test
  services/worker/tier_link_test services/worker/offload_queue_test
  services/worker/offload_allocation_test services/worker/landing_hold_test
  services/worker/pool_block_source_test
  services/store/data_stream_test services/store/data_stream_disk_test
  services/store/data_stream_keyed_get_test services/store/data_stream_keyed_put_test
  services/store/data_stream_allocation_test services/store/node_data_stream_test
  services/store/data_stream_lend_test services/store/splice_writer_test storage/host_tier_pin_test
)

targets=()
for program in "${programs[@]}"; do targets+=("$(basename "$program")"); done
cmake --build "$build_dir" -j "$jobs" --target "${targets[@]}" || exit 2

logs=$(mktemp -d /tmp/kvtier-tsan.XXXXXX)
failed=()
for program in "${programs[@]}"; do
  name=$(basename "$program")
  start=$(date +%s%N)
  # second_deadlock_stack: a lock-order report shows where both locks were taken.
  TSAN_OPTIONS="second_deadlock_stack=1 ${TSAN_OPTIONS:-}" \
    timeout 600 "$build_dir/$program" --gtest_brief=1 > "$logs/$name.log" 2>&1
  rc=$?
  elapsed_ms=$(( ($(date +%s%N) - start) / 1000000 ))
  races=$(grep -c '^WARNING: ThreadSanitizer' "$logs/$name.log")
  if [[ $rc -eq 0 && $races -eq 0 ]]; then
    printf 'ok     %-34s %d.%03d s\n' "$name" $((elapsed_ms / 1000)) $((elapsed_ms % 1000))
  else
    printf 'FAILED %-34s exit %d, %d ThreadSanitizer reports (%s)\n' "$name" "$rc" "$races" "$logs/$name.log"
    failed+=("$name")
  fi
done
if (( ${#failed[@]} > 0 )); then
  echo "tsan: ${#failed[@]} of ${#programs[@]} programs failed: ${failed[*]}"
  exit 1
fi
echo "tsan: all ${#programs[@]} programs passed with no race reported (logs: $logs)"
