#!/usr/bin/env bash
# Packs what scripts/gpu-check.sh runs on a GPU machine that has CUDA but none of kvtier's
# Debian libraries: the GPU test binaries and `kvtier` from BUILD_DIR (configure it with
# -DKVTIER_CUDA=ON), plus every shared library they load that is not part of glibc.
#
#   cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DKVTIER_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90
#   scripts/gpu-bundle.sh build-gpu build-devrun
set -euo pipefail

build=${1:?usage: gpu-bundle.sh BUILD_DIR BUNDLE_DIR}
bundle=${2:?usage: gpu-bundle.sh BUILD_DIR BUNDLE_DIR}
tests=(device_test copy_kernels_test quantize_test decode_attention_test chunked_attention_test sink_window_test
       quantized_pool_test
       shared_device_memory_test
       worker_storage_test)

benches=(host_tier_bench tiered_store_bench peer_fetcher_bench pool_storage_bench attention_bench)
ninja -C "$build" "${tests[@]}" kvtier gpu_ipc_peer "${benches[@]}"
rm -rf "$bundle"
mkdir -p "$bundle/bin" "$bundle/lib"
for t in "${tests[@]}"; do cp "$(find "$build" -name "$t" -type f -perm -u+x | head -1)" "$bundle/bin/"; done
for b in kvtier gpu_ipc_peer "${benches[@]}"; do cp "$build/bin/$b" "$bundle/bin/"; done
# For scripts/device-cpu-bench.sh: Redis, the transfer bench's baseline, and the trace.
if command -v redis-server >/dev/null; then cp -L "$(command -v redis-server)" "$bundle/bin/"; fi
if [[ -f ../shared/traces/conversation_trace.jsonl ]]; then cp ../shared/traces/conversation_trace.jsonl "$bundle/"; fi

# glibc and the C++ runtime come from the target machine (newer there, and compatible);
# everything else travels.
for binary in "$bundle"/bin/*; do
  ldd "$binary" | awk '/=> \// {print $3}'
done | sort -u | grep -Ev '/(libc|libm|libpthread|libdl|librt|ld-linux-x86-64|libstdc\+\+|libgcc_s)\.so' |
  while read -r lib; do cp -L "$lib" "$bundle/lib/"; done
strip --strip-unneeded "$bundle"/bin/* "$bundle"/lib/* 2>/dev/null || true
du -sh "$bundle"
