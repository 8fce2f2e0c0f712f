#!/usr/bin/env bash
# The CPU-bound benchmarks on a lent device machine (16 cores), from the bundle that
# scripts/gpu-bundle.sh packs: the coordinator's lookup over the RPC, the index replay,
# the store transfer against Redis, the host tier's copies from several threads, a
# worker's fetches from a peer and the disk tier against raw I/O. The development
# machine has two vCPUs, which the clients, the server threads and the kernel's loopback
# share; these runs show what the same binaries do with cores to spare.
#
#   [SECTIONS="lookup index ..."] [RUNS=N] scripts/device-cpu-bench.sh BUNDLE_DIR OUT_DIR
#
# SECTIONS picks what runs, in this order (default all): lookup index transfer streams
# host peer disk. RUNS (default 3) is how often the repeated runs repeat. A lease's minutes
# rarely fit everything. Each bench's JSON goes to OUT_DIR/*.jsonl and is printed last.
set -uo pipefail

bundle=${1:?usage: device-cpu-bench.sh BUNDLE_DIR OUT_DIR}
out=${2:?usage: device-cpu-bench.sh BUNDLE_DIR OUT_DIR}
mkdir -p "$out"
export LD_LIBRARY_PATH="$bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PATH="$bundle/bin:$PATH"  # redis-server, for --vs-redis
kvtier="$bundle/bin/kvtier"
trace="$bundle/conversation_trace.jsonl"
sections=" ${SECTIONS:-lookup index transfer streams host peer disk} "
want() { [[ "$sections" == *" $1 "* ]]; }
runs=${RUNS:-3}  # repeats of the runs that are repeated

{ nproc; lscpu | grep -E '^Model name'; df -h /tmp; lsblk -d -o NAME,ROTA,SIZE,MODEL 2>/dev/null; } >"$out/cpu.txt"
if want lookup; then
  # Each rate with the coordinator's RPC thread sleeping between calls (busy poll 0) and
  # polling for 50 us after each message, interleaved so that drift hits both alike.
  for rate in 1000 5000 10000 20000 40000; do
    for busy_poll_us in 0 50; do
      "$kvtier" bench lookup-rpc --trace "$trace" --seconds 3 --rate "$rate" --busy-poll-us "$busy_poll_us" --json
    done
  done >"$out/lookup_rpc.jsonl" 2>"$out/lookup_rpc.err"
  # Compact answers (the SDK's, the default) against the full form older clients ask for,
  # at the goal's rate, interleaved: what the cheaper answer buys in the tail.
  for run in $(seq "$runs"); do
    for form in "" --full-answers; do
      "$kvtier" bench lookup-rpc --trace "$trace" --seconds 3 --rate 20000 ${form:+"$form"} --json
    done
  done >"$out/lookup_rpc_answers.jsonl" 2>"$out/lookup_rpc_answers.err"
fi
if want index; then
  # The index on one core: runs of 21 passes, pinned to core 2 where taskset exists (away
  # from core 0's interrupts), so that the median pass is the core's, not the scheduler's.
  pin=()
  command -v taskset >/dev/null && pin=(taskset -c 2)
  {
    for run in $(seq "$runs"); do
      "${pin[@]}" "$kvtier" bench index --trace "$trace" --passes 21 --json
    done
    # And every worker's pool windowed (16 blocks, one sink): the windowed path's speed.
    "${pin[@]}" "$kvtier" bench index --trace "$trace" --passes 21 --window-blocks 16 --sink-blocks 1 --json
  } >"$out/index.jsonl" 2>"$out/index.err"
fi
if want transfer; then
  # 2 GiB per phase: the 256 MiB default lasts under 0.1 s here.
  for block in 262144 2097152; do
    for run in $(seq "$runs"); do
      "$kvtier" bench transfer --block-bytes "$block" --clients 8 --total-bytes 2147483648 --vs-redis --json
    done
  done >"$out/transfer.jsonl" 2>"$out/transfer.err"
  # Each client's keyed gets one at a time and two deep (the next keys sent before the
  # current reply is read), in turn: what a client's round trip costs the gets.
  for block in 262144 2097152; do
    for run in $(seq "$runs"); do
      for in_flight in 1 2; do
        "$kvtier" bench transfer --block-bytes "$block" --clients 8 --total-bytes 2147483648 --path stream \
            --stream-gets-in-flight "$in_flight" --json
      done
    done
  done >"$out/transfer_pipelined.jsonl" 2>"$out/transfer_pipelined.err"
fi
if want streams; then
  # The data stream's event loops: 1 (one sending thread, as before) to 8.
  for block in 262144 2097152; do
    for threads in 1 2 4 8; do
      "$kvtier" bench transfer --block-bytes "$block" --clients 8 --total-bytes 2147483648 --path stream \
          --stream-threads "$threads" --json
    done
  done >"$out/transfer_threads.jsonl" 2>"$out/transfer_threads.err"
fi
if want host; then
  # The host tier's gets and puts from 1 to 16 threads (copies run outside its lock).
  "$bundle/bin/host_tier_bench" --benchmark_min_time=1 --benchmark_format=json \
      >"$out/host_tier.json" 2>"$out/host_tier.err"
  # The tiered store's puts from 1 to 16 threads (they run in parallel into the host tier).
  "$bundle/bin/tiered_store_bench" --benchmark_min_time=1 --benchmark_format=json \
      >"$out/tiered_store.json" 2>"$out/tiered_store.err"
fi
if want peer; then
  # A worker's fetches from a peer (16 blocks a fetch, keyed gets): from its tiers, from its
  # pool copied on its loop, from its pool held (copied off the loop), with the wait a
  # call to the peer's loop sees meanwhile, `runs` rounds.
  for run in $(seq "$runs"); do
    "$bundle/bin/peer_fetcher_bench" --benchmark_filter='stream:1/' --benchmark_min_time=1 --benchmark_format=json \
        >"$out/peer_fetcher_$run.json" 2>>"$out/peer_fetcher.err"
  done
fi
if want disk; then
  # The disk tier against raw sequential I/O on this machine's disk (cpu.txt names it), from
  # one and four threads: whether the tier's writer lock costs anything where the disk is fast.
  disk_dir=$(mktemp -d)
  for threads in 1 4; do
    "$kvtier" bench disk --dir "$disk_dir" --threads "$threads" --json
    "$kvtier" bench disk --dir "$disk_dir" --threads "$threads" --sync fsync --block-bytes 262144 --batch-blocks 4 --json
  done >"$out/disk.jsonl" 2>"$out/disk.err"
  rm -rf "$disk_dir"
fi

cat "$out/cpu.txt" "$out"/*.jsonl
for f in "$out"/*.err; do tail -n 3 "$f"; done
