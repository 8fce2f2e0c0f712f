#!/usr/bin/env bash
# Runs the GPU tests and kernel benchmarks on a machine with an NVIDIA GPU, from binaries
# built elsewhere (the GPU machine need not have kvtier's Debian libraries):
#
#   scripts/gpu-bundle.sh build-gpu build-devrun     # here: binaries + the shared libraries they need
#   scripts/gpu-check.sh build-devrun OUT_DIR        # there: tests, compute-sanitizer, benchmarks
#
# SECTIONS picks what runs (default all): tests memcheck pool e2e tls.
# Logs go to OUT_DIR; the last lines printed are a summary table. Exit status: 0 when every
# test passed, 1 otherwise (benchmarks never fail the run; their figures are recorded).
set -uo pipefail

bundle=${1:?usage: gpu-check.sh BUNDLE_DIR OUT_DIR}
out=${2:?usage: gpu-check.sh BUNDLE_DIR OUT_DIR}
mkdir -p "$out"
export LD_LIBRARY_PATH="$bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
sections=" ${SECTIONS:-tests memcheck pool e2e tls} "
want() { [[ "$sections" == *" $1 "* ]]; }

nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv | tee "$out/gpu.txt"

failed=0
summary=()
if want tests; then
  for test in "$bundle"/bin/*_test; do
    name=$(basename "$test")
    if "$test" --gtest_color=no >"$out/test.log" 2>&1; then result=passed; else result=FAILED; failed=1; fi
    skipped=$(grep -c '^\[  SKIPPED \]' "$out/test.log")
    summary+=("$name: $result ($(grep -m1 -o '[0-9]* tests\? from [0-9]* test suites\? ran' "$out/test.log"), $skipped skipped lines)")
    { echo "=== $name"; cat "$out/test.log"; } >>"$out/tests.log"
  done
fi

# Every kernel test again under compute-sanitizer's memcheck: an out-of-bounds access or a
# leak of device memory fails it.
if want memcheck && command -v compute-sanitizer >/dev/null; then
  for name in copy_kernels_test quantize_test decode_attention_test chunked_attention_test quantized_pool_test sink_window_test; do
    if compute-sanitizer --tool memcheck --leak-check full --error-exitcode 3 "$bundle/bin/$name" --gtest_color=no \
        >"$out/test.log" 2>&1; then result=clean; else result=ERRORS; failed=1; fi
    { echo "=== memcheck $name"; cat "$out/test.log"; } >>"$out/sanitizer.log"
    summary+=("memcheck $name: $result")
  done
fi

kvtier="$bundle/bin/kvtier"
if want pool; then
  {
    # Sizes that overflow the 50-60 MB L2 so that device memory, not the cache, is measured.
    for run in 1 2 3; do
      "$kvtier" bench pool --json --block-bytes 2097152 --batch-blocks 256 --copy-pool-blocks 1024 --update-batch 256
    done
    for run in 1 2; do
      "$kvtier" bench pool --json --block-bytes 262144 --batch-blocks 2048 --copy-pool-blocks 8192 --update-batch 256
    done
    # A 1 GiB update and 1 GiB batches: the fixed cost per call (launches and one wait)
    # spread over more bytes; batches of more than 256 blocks take the validation kernel.
    "$kvtier" bench pool --json --block-bytes 2097152 --batch-blocks 512 --copy-pool-blocks 2048 --update-batch 1024
    # Small batches, where a call's fixed cost shows: 32 MiB of 256 KiB blocks with a 16 MiB
    # update, twice, and the CPU defaults (16 blocks of 2 MiB, 16 MiB update) twice.
    for run in 1 2; do
      "$kvtier" bench pool --json --block-bytes 262144 --batch-blocks 128 --copy-pool-blocks 8192 --update-batch 16
    done
    for run in 1 2; do
      "$kvtier" bench pool --json
    done
  } >"$out/bench_pool.jsonl" 2>"$out/bench_pool.err"
  # A device pool's copies for peers: on the worker's loop against the copiers other
  # threads take (CopyHeld, LandHeld), 1 to 8 threads at once.
  "$bundle/bin/pool_storage_bench" --benchmark_min_time=1 --benchmark_format=json \
      >"$out/pool_storage.json" 2>"$out/pool_storage.err"
  # Chunked prefill attention, paged against dense (one block per context), on the GPU.
  "$bundle/bin/attention_bench" --benchmark_filter=Cuda --benchmark_repetitions=3 \
      --benchmark_report_aggregates_only=true --benchmark_format=json \
      >"$out/attention.json" 2>"$out/attention.err"
fi

# End to end: `kvtier up` with its pool in GPU memory (a 256 KiB-block layout, the pool
# capped at 4096 blocks so that the replay evicts: each allocation's victims leave in one
# gather into pinned memory, each onboard lands in one scatter), the built-in chat workload
# replayed through the RPC by 4 clients, then the worker's transfer counters.
if want e2e; then
  e2e_dir=$(mktemp -d)
  "$kvtier" up --data-dir "$e2e_dir" --auth-enabled false --metrics-port 9499 --worker-num-layers 4 \
      --worker-num-kv-heads 8 --worker-head-dim 128 --worker-max-tokens 65536 --store-host-cache-bytes 8589934592 \
      --store-disk-bytes 0 >"$out/e2e_up.log" 2>&1 &
  up_pid=$!
  for _ in $(seq 300); do grep -q "Stop with Ctrl-C" "$out/e2e_up.log" && break; sleep 0.1; done
  if grep -q "Stop with Ctrl-C" "$out/e2e_up.log"; then
    "$kvtier" replay --connect 127.0.0.1:7400 --conversations 400 --workers 4 >"$out/e2e_replay.txt" 2>&1
    # /metrics without curl (the GPU machine may lack it): one HTTP/1.0 GET over bash's /dev/tcp.
    exec 3<>/dev/tcp/127.0.0.1/9499
    printf 'GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n' >&3
    # And each RPC method's calls and time: where the lookups' tail comes from.
    grep -E '^kvtier_worker_(transfer_seconds_total|tier_seconds_total|offloaded_bytes_total|onboarded_bytes_total|evictions_total)|^kvtier_rpc_request_duration_seconds_(sum|count)|^kvtier_coordinator_(orphaned|adopted|waiting)_blocks' <&3 \
        >"$out/e2e_metrics.txt"
    exec 3<&-
    summary+=("e2e replay: $(grep -m1 'requests of' "$out/e2e_replay.txt")")
  else
    summary+=("e2e replay: kvtier up did not start (see e2e_up.log)")
    failed=1
  fi
  kill -TERM "$up_pid" 2>/dev/null
  wait "$up_pid" 2>/dev/null
  rm -rf "$e2e_dir"
fi

# The data stream over TLS beside plaintext, 8 clients, at 256 KiB and 2 MiB blocks (each
# line has the stream_* and tls_stream_* figures; --tls makes a throwaway certificate).
if want tls; then
  for bytes in 262144 2097152; do
    "$bundle/bin/kvtier" bench transfer --json --block-bytes "$bytes" --clients 8 \
      --total-bytes $((bytes * 1024)) --tls >>"$out/bench_tls.jsonl" 2>>"$out/bench_tls.log"
  done
  summary+=("tls transfer: $(wc -l <"$out/bench_tls.jsonl" 2>/dev/null || echo 0) runs (bench_tls.jsonl)")
fi

rm -f "$out/test.log"
printf '%s\n' "${summary[@]}"
cat "$out/bench_pool.jsonl" "$out/bench_tls.jsonl" 2>/dev/null
cat "$out/e2e_replay.txt" "$out/e2e_metrics.txt" 2>/dev/null
exit $failed
