#!/usr/bin/env bash
# The GPU benchmark at K3's real layer sizes, run on the GPU machine in one call: build .dev/potato here
# first (CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o .dev/potato ./cmd/potato) and carry it.
# Writes $OUT/bench_k3_layer.txt; docs/benchmarks.md records the figures.
set -uo pipefail
OUT=${OUT:-/tmp/out}
POTATO=${POTATO:-.dev/potato} # the binary (built here with CGO_ENABLED=0)
mkdir -p "$OUT"
LAYERS=${LAYERS:-3}          # KDA+dense, KDA+MoE, MLA+MoE: one of each kind (about 40 GB)
TOKENS=${TOKENS:-1024,4096,16384,65536}
# EXTRA: more bench flags, e.g. "--host-cache 40GB --resident 5GB" to stream from pinned host memory
# with the layers' own weights kept on the GPU (the "from pinned memory" case of docs/benchmarks.md).
EXTRA=${EXTRA:-}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/bench_k3_layer.txt"
df -h /tmp | tail -1
start=$(date +%s)
"$POTATO" synth --preset k3-layer --layers "$LAYERS" --seed 1 --out /tmp/k3layer 2>&1 | tail -1 | tee -a "$OUT/bench_k3_layer.txt"
echo "synth: $(( $(date +%s) - start ))s" | tee -a "$OUT/bench_k3_layer.txt"
timeout 480 "$POTATO" bench --backend cuda --model /tmp/k3layer --tokens "$TOKENS" --seq-len 4096 --repeat 1 \
  --expert-chunk 128 --bound-flops 790e12 --bound-bandwidth 55e9 $EXTRA 2>&1 | tee -a "$OUT/bench_k3_layer.txt"
