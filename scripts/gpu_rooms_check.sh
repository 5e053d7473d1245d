#!/usr/bin/env bash
# The H200 check of the cuda rooms split (issue 14), in one device call: the same checks on the binaries of
# commit 6ba5801 (before) and of branch h-rooms (after), one beside the other, everything under $OUT.
#
# Build the two sets here (the GPU machine has no Go), from the repository root of the h-rooms worktree:
#
#   set -e
#   build() { # $1: source tree, $2: output dir
#     mkdir -p "$2"
#     (cd "$1" && CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$2/potato" ./cmd/potato &&
#       CGO_ENABLED=0 go test -c -trimpath -ldflags='-s -w' -o "$2/cuda.test" ./cuda/ &&
#       CGO_ENABLED=0 go test -c -trimpath -ldflags='-s -w' -o "$2/replay.test" ./replay/)
#   }
#   git worktree add --detach /tmp/wt-before 6ba5801
#   build /tmp/wt-before "$PWD/.dev/before"
#   git worktree remove /tmp/wt-before
#   build "$PWD" "$PWD/.dev/after"
#   gzip -9 .dev/before/* .dev/after/*   # only when the six files pass 64 MiB (the carry limit)
#
# .dev/ is ignored (.git/info/exclude), so the device call carries it:
#   run(command="bash scripts/gpu_rooms_check.sh", carry=[".dev/before", ".dev/after"], timeout_s=600)
#
# What runs (about 7-8 minutes on the H200; DEADLINE stops starting new steps past its seconds):
#   1. potato synth --preset k3-layer --layers 3 (once, about 45 s; after's binary: the format is unchanged)
#   2. per build: the cuda tests (cuda.test -test.v $CUDA_FLAGS, by default -test.short: every correctness
#      test, conformance in both precisions, against the CPU backend, batch invariance; the full suite with
#      its timing tests is about 200 s a binary: CUDA_FLAGS= runs it), the replay agreement tests
#      (scripts/gpu_agreement.sh's replay.test -test.run CUDA), the timing tests of the kernels the split
#      touched (KDA, ShortConv, TokenStats) and the k3-layer bench at 16,384 and 65,536 tokens with run 7's
#      flags (docs/benchmarks.md: --repeat 3, pinned host cache, resident layers).
#   3. $OUT/summary.txt: pass/fail counts, agreement lines, TIMING lines and the bench waves, before beside
#      after.
set -uo pipefail
OUT=${OUT:-/tmp/out}
CUDA_FLAGS=${CUDA_FLAGS--test.short}
DEADLINE=${DEADLINE:-530} # seconds from the start after which no new step starts
TOKENS=${TOKENS:-16384,65536}
REPEAT=${REPEAT:-3}
MODEL=${MODEL:-/tmp/k3layer}
ROOT=$(pwd)
mkdir -p "$OUT/before" "$OUT/after"
t0=$(date +%s)
log() { echo "[$(( $(date +%s) - t0 ))s] $*" | tee -a "$OUT/steps.txt"; }
left() { # seconds a step may take: $1, or less so that the call ends by 590 s
  local l=$(( 590 - ($(date +%s) - t0) ))
  (( l < $1 )) && echo "$l" || echo "$1"
}
late() { # true (and logged) past the deadline
  if (( $(date +%s) - t0 > DEADLINE )); then log "SKIPPED past the deadline: $*"; return 0; fi
  return 1
}

# The binaries, gunzipped when they came compressed (to /tmp: the carried tree may be read-only).
for b in before after; do
  mkdir -p "/tmp/rooms/$b"
  for f in potato cuda.test replay.test; do
    if [[ -f ".dev/$b/$f.gz" ]]; then
      gunzip -c ".dev/$b/$f.gz" > "/tmp/rooms/$b/$f"
    elif [[ -f ".dev/$b/$f" ]]; then
      cp ".dev/$b/$f" "/tmp/rooms/$b/$f"
    else
      log "missing .dev/$b/$f(.gz)"; exit 2
    fi
    chmod +x "/tmp/rooms/$b/$f"
  done
done
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
export POTATO_CUDA_CACHE=/tmp/rooms/kernel-cache

cuda_tests() { # $1: build; $2: log name; rest: flags
  local b=$1 name=$2; shift 2
  log "$b: cuda.test $*"
  (cd "$ROOT/cuda" && timeout "$(left 300)" "/tmp/rooms/$b/cuda.test" -test.v "$@" > "$OUT/$b/$name.log" 2>&1)
  log "$b: cuda.test exit $? ($(grep -c '^--- PASS' "$OUT/$b/$name.log") passed, $(grep -c '^--- FAIL' "$OUT/$b/$name.log") failed, $(grep -c '^--- SKIP' "$OUT/$b/$name.log") skipped)"
}
replay_tests() {
  local b=$1
  log "$b: replay.test -test.run CUDA"
  (cd "$ROOT/replay" && timeout "$(left 120)" "/tmp/rooms/$b/replay.test" -test.v -test.run CUDA > "$OUT/$b/replay_cuda_test.log" 2>&1)
  log "$b: replay.test exit $?"
}
bench() {
  local b=$1
  log "$b: bench --tokens $TOKENS --repeat $REPEAT"
  timeout "$(left 240)" "/tmp/rooms/$b/potato" bench --backend cuda --model "$MODEL" --tokens "$TOKENS" --seq-len 4096 --repeat "$REPEAT" \
    --expert-chunk 128 --bound-flops 790e12 --bound-bandwidth 55e9 --host-cache 45GB --resident 5GB \
    > "$OUT/$b/bench_k3_layer.txt" 2>&1
  log "$b: bench exit $?"
}

log "synth $MODEL"
timeout "$(left 150)" /tmp/rooms/after/potato synth --preset k3-layer --layers 3 --seed 1 --out "$MODEL" > "$OUT/synth.txt" 2>&1
log "synth exit $?"

# The most telling steps first, so that a slow machine still leaves the comparison.
late "after cuda tests" || cuda_tests after cuda_test $CUDA_FLAGS
late "after replay tests" || replay_tests after
late "before replay tests" || replay_tests before
late "after bench" || bench after
late "before bench" || bench before
TIMING='TestKDATiming|TestShortConvTiming|TestTokenStatsK3'
late "after timing" || cuda_tests after cuda_timing -test.run "$TIMING"
late "before timing" || cuda_tests before cuda_timing -test.run "$TIMING"
late "before cuda tests" || cuda_tests before cuda_test $CUDA_FLAGS

{
  for b in before after; do
    echo "=== $b"
    for f in cuda_test cuda_timing; do
      [[ -f "$OUT/$b/$f.log" ]] || continue
      echo "--- $f: $(grep -c '^--- PASS' "$OUT/$b/$f.log") passed, $(grep -c '^--- FAIL' "$OUT/$b/$f.log") failed"
      grep -E '^--- FAIL|^FAIL|panic' "$OUT/$b/$f.log" | head -20
      grep -E 'TIMING (KDA|shortconv|TokenStats)' "$OUT/$b/$f.log" | sed 's/^ *//' | head -20
    done
    if [[ -f "$OUT/$b/replay_cuda_test.log" ]]; then
      echo "--- replay agreement"
      grep -E '(--- (PASS|FAIL)|top-1|rel err|^ok|^FAIL)' "$OUT/$b/replay_cuda_test.log" | head -30
    fi
    if [[ -f "$OUT/$b/bench_k3_layer.txt" ]]; then
      echo "--- bench"
      grep -E '^(device|warm-up|wave of)|kda\+|mla\+|readout|full K3|rror' "$OUT/$b/bench_k3_layer.txt" | cut -c1-160 | head -40
    fi
  done
} > "$OUT/summary.txt"
log "done"
cat "$OUT/summary.txt"
grep -q '^--- FAIL' "$OUT"/after/*.log 2>/dev/null && exit 1
exit 0
