#!/usr/bin/env bash
# An A/B run of the GPU benchmark on the GPU machine: the same k3-layer checkpoint, written once, benched by
# several builds of potato in turn (each built here with CGO_ENABLED=0 and carried), so that one call
# compares a change against its baseline. Each build's output goes to $OUT/bench_<name>.txt.
#   BINS=".dev/gpu/potato .dev/gpu/potato-b" TOKENS=16384,65536 EXTRA="--host-cache 45GB --resident 5GB --op-profile" \
#     OUT=$OUT bash scripts/gpu_bench_ab.sh
set -uo pipefail
OUT=${OUT:-/tmp/out}
BINS=${BINS:?BINS: the potato binaries to compare, space-separated}
TOKENS=${TOKENS:-16384,65536}
EXTRA=${EXTRA:-}
LIMIT=${LIMIT:-200} # seconds a build's bench may take
mkdir -p "$OUT"
first=${BINS%% *}
start=$(date +%s)
"$first" synth --preset k3-layer --layers 3 --seed 1 --out /tmp/k3layer 2>&1 | tail -1
echo "synth: $(( $(date +%s) - start ))s"
for bin in $BINS; do
  name=$(basename "$bin")
  echo "== $name"
  timeout "$LIMIT" "$bin" bench --backend cuda --model /tmp/k3layer --tokens "$TOKENS" --seq-len 4096 --repeat 1 \
    --expert-chunk 128 --bound-flops 790e12 --bound-bandwidth 55e9 $EXTRA >"$OUT/bench_$name.txt" 2>&1
  echo "exit $?"
  grep -E '^(layer kind|kda|mla|a full|bench|device|warm-up|wave)' "$OUT/bench_$name.txt" | head -40
done
