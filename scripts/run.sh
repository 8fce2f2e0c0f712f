#!/usr/bin/env bash
# `make run`: start `kvtier up` (every role in one process), replay the built-in
# multi-turn chat workload against it through the RPC, print the report, and stop it.
#
#   scripts/run.sh BIN_DIR [kvtier up flags...]
#
# The server's own output goes to DATA_DIR/up.log. REPLAY_ARGS adds `kvtier replay`
# flags (e.g. REPLAY_ARGS="--trace ../shared/traces/conversation_trace.jsonl").
set -euo pipefail

bin_dir=${1:?usage: scripts/run.sh BIN_DIR [kvtier up flags...]}
shift
kvtier="$bin_dir/kvtier"
# The data directory: the one given, else kvtier's default.
data_dir=./kvtier-data
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  [[ ${args[i]} == --data-dir ]] && data_dir=${args[i + 1]:-$data_dir}
  [[ ${args[i]} == --data-dir=* ]] && data_dir=${args[i]#--data-dir=}
done
[[ ${#args[@]} -gt 0 && " ${args[*]} " == *" --data-dir"* ]] || args+=(--data-dir "$data_dir")
mkdir -p "$data_dir"
log="$data_dir/up.log"

"$kvtier" up "${args[@]}" >"$log" 2>&1 &
up_pid=$!
stop() {
  kill -TERM "$up_pid" 2>/dev/null || true
  wait "$up_pid" 2>/dev/null || true
}
trap stop EXIT

for _ in $(seq 300); do
  grep -q "Stop with Ctrl-C" "$log" 2>/dev/null && break
  if ! kill -0 "$up_pid" 2>/dev/null; then
    echo "kvtier up did not start:" >&2
    cat "$log" >&2
    exit 1
  fi
  sleep 0.1
done
grep -q "Stop with Ctrl-C" "$log" || { echo "kvtier up did not start within 30 s:" >&2; cat "$log" >&2; exit 1; }
sed '/Stop with Ctrl-C/d' "$log"
echo

rpc=$(awk '$1 == "rpc" { sub(",", "", $2); print $2; exit }' "$log")
token=()
[[ -f "$data_dir/token" ]] && token=(--token-file "$data_dir/token")
# shellcheck disable=SC2086  # REPLAY_ARGS is a list of flags
"$kvtier" replay --connect "$rpc" "${token[@]}" ${REPLAY_ARGS:---conversations 200}
echo
echo "kvtier up stopped (its log: $log). To keep a server running: $kvtier up"
