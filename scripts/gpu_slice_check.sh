#!/usr/bin/env bash
# Token-sliced layers on the H200 (issue 13), in one device call: plans for large waves and long sequences,
# then the k3-layer bench (K3's real layer sizes, 3 layers: one of each kind) on waves past what one slice
# holds, each with its plan line and the GPU memory peak (nvidia-smi, sampled every 100 ms) beside the plan's
# device peak, and the SM clock, power and temperature while the GPU was busy (gpu_busy_summary.sh). Build here first and carry .dev/after:
#   mkdir -p .dev/after && CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o .dev/after/potato ./cmd/potato && gzip -9f .dev/after/potato
#   (and for the tests step: CGO_ENABLED=0 go test -c -trimpath -ldflags='-s -w' -o .dev/after/cuda.test ./cuda, the same
#   for ./replay to .dev/after/replay.test, both gzipped)
#   run(command="bash scripts/gpu_slice_check.sh", carry=[".dev/after"], timeout_s=600)
# Writes $OUT/summary.txt (plan lines, waves, per-kind tables, memory peaks), $OUT/steps.txt and each
# step's full output. docs/benchmarks.md records the figures. DEV (default .dev/after) names another folder
# of binaries (scripts/gpu_variants.sh runs this script once a variant).
set -uo pipefail
DEV=${DEV:-.dev/after}
OUT=${OUT:-/tmp/out}
MODEL=${MODEL:-/tmp/k3layer}
mkdir -p "$OUT" /tmp/slice
P=/tmp/slice/potato
for f in potato cuda.test replay.test; do
  rm -f "/tmp/slice/$f" # a warm machine keeps /tmp: never run an earlier call's binary
  if [[ -f $DEV/$f.gz ]]; then gunzip -c "$DEV/$f.gz" > "/tmp/slice/$f"; elif [[ -f $DEV/$f ]]; then cp "$DEV/$f" "/tmp/slice/$f"; fi
  [[ -f /tmp/slice/$f ]] && chmod +x "/tmp/slice/$f"
done
ROOT=$(pwd)
t0=$(date +%s)
log() { echo "[$(( $(date +%s) - t0 ))s] $*" | tee -a "$OUT/steps.txt"; }
# tests: the sliced-op checks on the device (go test -c ./cuda ./replay): TESTS_CUDA and TESTS_REPLAY are
# their -test.run patterns.
# Each binary's tests run when it came along; asking for the tests with neither is an error in the summary.
if [[ ${STEPS:-all} == all || " ${STEPS:-all} " == *" tests "* ]]; then
  if [[ -x /tmp/slice/cuda.test ]]; then
    log "cuda.test -test.run ${TESTS_CUDA:=TestSlicesPrefixInParts|TestMLAPrefixRowsChecked|TestMLA|TestConformance$}"
    (cd "$ROOT/cuda" && timeout 240 /tmp/slice/cuda.test -test.v -test.short -test.run "$TESTS_CUDA" > "$OUT/cuda_test.log" 2>&1)
    log "cuda.test exit $? ($(grep -c -- '--- PASS' "$OUT/cuda_test.log") passed, $(grep -c -- '--- FAIL' "$OUT/cuda_test.log") failed)"
    grep -E -- "--- FAIL|^FAIL|^ok|panic" "$OUT/cuda_test.log" | head -40 >> "$OUT/summary.txt"
  fi
  if [[ -x /tmp/slice/replay.test ]]; then
    log "replay.test -test.run ${TESTS_REPLAY:=TestCUDASliceInvariance}"
    (cd "$ROOT/replay" && timeout 180 /tmp/slice/replay.test -test.v -test.run "$TESTS_REPLAY" > "$OUT/replay_test.log" 2>&1)
    log "replay.test exit $? ($(grep -c -- '--- PASS' "$OUT/replay_test.log") passed, $(grep -c -- '--- FAIL' "$OUT/replay_test.log") failed)"
    grep -E -- "--- FAIL|^FAIL|^ok|panic|differ" "$OUT/replay_test.log" | head -40 >> "$OUT/summary.txt"
  fi
  if [[ ! -x /tmp/slice/cuda.test && ! -x /tmp/slice/replay.test ]]; then
    log "tests: no cuda.test or replay.test in $DEV (build them with go test -c)" | tee -a "$OUT/summary.txt"
  fi
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
free -g | tee -a "$OUT/gpu.txt"
# The model, unless only the tests and the Arrow check run; written beside and renamed, so that a call cut
# short never leaves a half-written model for the next.
if [[ ! -d "$MODEL" && " ${STEPS:-all} " != " tests " && " ${STEPS:-all} " != " arrow " && " ${STEPS:-all} " != " tests arrow " ]]; then
  log "synth $MODEL"
  rm -rf "$MODEL.partial"
  "$P" synth --preset k3-layer --layers 3 --seed 1 --out "$MODEL.partial" > "$OUT/synth.txt" 2>&1 && mv "$MODEL.partial" "$MODEL"
  log "synth exit $?"
fi
# EXTRA: more bench flags for every step (scripts/gpu_variants.sh: "bench VARIANT STEP FLAGS...")
# shellcheck disable=SC2206
FLAGS=(--backend cuda --model "$MODEL" --expert-chunk 128 --bound-flops 790e12 --bound-bandwidth 55e9 --repeat 1 ${EXTRA:-})
# the same with the default --expert-chunk 0: on a small card the plan picks the chunk (replay/plan_chunks.go)
AUTO=(--backend cuda --model "$MODEL" --bound-flops 790e12 --bound-bandwidth 55e9 --repeat 1)
PINNED=(--host-cache 45GB --resident 5GB)
# step NAME LIMIT ARGS...: runs the binary with ARGS for at most LIMIT seconds (less near the call's end)
# STEPS: the steps to run (default: all), e.g. STEPS="plans pinned_1m"; DEADLINE: the seconds this script
# may take (default 585: one device call), less when another script shares the call
STEPS=${STEPS:-all}
DEADLINE=${DEADLINE:-585}
step() {
  local name=$1 lim=$2
  shift 2
  if [[ $STEPS != all && " $STEPS " != *" $name "* ]]; then return; fi
  local left=$(( DEADLINE - ($(date +%s) - t0) ))
  if (( left < 25 )); then log "SKIPPED $name (no time left)"; echo "== $name: skipped, no time left" >> "$OUT/summary.txt"; return; fi
  (( lim > left )) && lim=$left
  log "$name: $*"
  nvidia-smi --query-gpu=memory.used,clocks.sm,power.draw,temperature.gpu,utilization.gpu --format=csv,noheader,nounits \
    -lms 100 > "/tmp/slice/$name.mem" 2>/dev/null &
  local mp=$!
  timeout "$lim" "$P" "$@" > "$OUT/$name.txt" 2>&1
  local rc=$?
  kill "$mp" 2>/dev/null; wait "$mp" 2>/dev/null
  local peak busy
  peak=$(cut -d, -f1 "/tmp/slice/$name.mem" | sort -n | tail -1)
  busy=$(bash "$(dirname "${BASH_SOURCE[0]}")/gpu_busy_summary.sh" "/tmp/slice/$name.mem")
  log "$name exit $rc; GPU memory peak $peak MiB; $busy"
  {
    echo "== $name (exit $rc; GPU memory peak $peak MiB = $(( ${peak:-0} * 1048576 / 1000000000 )) GB): $*"
    echo "$busy"
    grep -E "^plan:|^wave of|kda\+|mla\+|readout|full K3|warning|over the memory|warm-up|^device memory over|^  op |ExpertsAccumulate|KDA |MLA |Error|error" "$OUT/$name.txt" | head -80
  } >> "$OUT/summary.txt"
}
step plans 120 bench "${FLAGS[@]}" --plan-only --tokens 65536,131072,262144,1048576 --seq-len 4096
step plans_single 60 bench "${FLAGS[@]}" --plan-only --tokens 65536,262144,524288,1048576 --seq-len 1048576
step plans_24gb 60 bench "${FLAGS[@]}" --plan-only --device-memory 24GB --tokens 16384,32768,262144 --seq-len 262144
step pinned_262k 150 bench "${FLAGS[@]}" "${PINNED[@]}" --tokens 262144 --seq-len 4096
step pinned_1m 200 bench "${FLAGS[@]}" "${PINNED[@]}" --tokens 1048576 --seq-len 4096
step disk_262k 120 bench "${FLAGS[@]}" --direct-io --tokens 262144 --seq-len 4096
step disk_1m 200 bench "${FLAGS[@]}" --direct-io --tokens 1048576 --seq-len 4096
# the same without the experts read ahead of their routers (replay/readahead.go): the A/B of that feature
step disk_1m_nora 200 bench "${FLAGS[@]}" --direct-io --no-expert-read-ahead --tokens 1048576 --seq-len 4096
step single_262k 150 bench "${FLAGS[@]}" --tokens 262144 --seq-len 262144
step single_16k_24gb 120 bench "${FLAGS[@]}" --device-memory 24GB --tokens 16384 --seq-len 16384
step single_1m 330 bench "${FLAGS[@]}" --op-profile --tokens 1048576 --seq-len 1048576
step single_262k_24gb 200 bench "${FLAGS[@]}" --device-memory 24GB --tokens 262144 --seq-len 262144
step prof_262k_24gb 200 bench "${FLAGS[@]}" --op-profile --device-memory 24GB --tokens 262144 --seq-len 262144
step plans_24gb_auto 60 bench "${AUTO[@]}" --plan-only --device-memory 24GB --tokens 16384,32768,262144 --seq-len 262144
step single_262k_24gb_auto 200 bench "${AUTO[@]}" --device-memory 24GB --tokens 262144 --seq-len 262144
step disk_262k_24gb_auto 300 bench "${AUTO[@]}" --direct-io --device-memory 24GB --tokens 262144 --seq-len 262144
step prof_262k_24gb_auto 200 bench "${AUTO[@]}" --op-profile --device-memory 24GB --tokens 262144 --seq-len 262144
# Where a layer's time goes, per op (--op-profile), in one slice and past it.
step prof_65k 120 bench "${FLAGS[@]}" "${PINNED[@]}" --op-profile --tokens 65536 --seq-len 4096
step prof_262k 150 bench "${FLAGS[@]}" "${PINNED[@]}" --op-profile --tokens 262144 --seq-len 4096
# the same wave with the MoE layers slice by slice (--no-expert-pooling: a routed-expert call a slice), the
# A/B of the pooled expert calls the plan chooses where a layer's experts and the state fit the device
# (replay/plan_pool.go); and pooled with the chunk the plan picks (--expert-chunk 0)
step prof_262k_sliced 150 bench "${FLAGS[@]}" "${PINNED[@]}" --no-expert-pooling --op-profile --tokens 262144 --seq-len 4096
step prof_262k_auto 150 bench "${AUTO[@]}" "${PINNED[@]}" --op-profile --tokens 262144 --seq-len 4096
# the same wave with MoE layers expert-major (--expert-major): the slices pooled into each chunk's expert
# calls, the expert inputs through host memory
step prof_262k_major 150 bench "${FLAGS[@]}" "${PINNED[@]}" --expert-major --op-profile --tokens 262144 --seq-len 4096
# The tables a replay writes, opened by pyarrow (installed on the GPU machine, not on CI's), as README says.
if [[ $STEPS == all || " $STEPS " == *" arrow "* ]]; then
  mkdir -p /tmp/slice/arrow
  for ext in arrow arrows parquet; do
    "$P" replay --text "The cat sat on the mat. It was warm." --top-k 3 --lens 0,1 --hidden 1 --router --attnres --no-progress --show 0 --out /tmp/slice/arrow/res.$ext >> "$OUT/arrow.txt" 2>&1
  done
  python3 scripts/arrow_readers_check.py /tmp/slice/arrow >> "$OUT/arrow.txt" 2>&1
  log "arrow readers exit $?"
  cat "$OUT/arrow.txt" >> "$OUT/summary.txt"
fi
log done
# A call brings back at most 8 files: with PACK=1 everything written goes back as one archive.
if [[ ${PACK:-0} == 1 ]]; then
  (cd "$OUT" && tar czf /tmp/slice/out.tgz -- *) && rm -rf "${OUT:?}"/* && mv /tmp/slice/out.tgz "$OUT/out.tgz" # by name: no "./" entry (scripts/gpu_variants.sh)
fi
