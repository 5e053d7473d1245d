#!/usr/bin/env bash
# The wgmma expert kernels (cuda/kernels/experts_wg.cu) on the H200, in one device call: ptxas's report
# for the file, the correctness tests (wgmma against the grouped kernels, itself over subsets; the grouped
# and cuBLASLt paths whose decoders moved into experts.cuh), then the timing test against the cuBLASLt
# path at K3's sizes. Build here first and carry .dev/wg:
#   mkdir -p .dev/wg && CGO_ENABLED=0 go test -c -trimpath -ldflags='-s -w' -o .dev/wg/cuda.test ./cuda && gzip -9f .dev/wg/cuda.test
#   run(command="bash scripts/gpu_experts_wg.sh", carry=[".dev/wg"], timeout_s=600)
# TESTS: the correctness tests' -test.run pattern; TIMING=0 skips the timing test.
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
T=/tmp/wg/cuda.test
mkdir -p /tmp/wg && rm -f "$T" && gunzip -c .dev/wg/cuda.test.gz > "$T" && chmod +x "$T"
t0=$(date +%s)
log() { echo "[$(( $(date +%s) - t0 ))s] $*" | tee -a "$OUT/steps.txt"; }
cd cuda
log "ptxas report for experts_wg.cu (sm_90a)"
POTATO_PTXAS_FILE=experts_wg.cu POTATO_CUDA_ARCH=sm_90a timeout 120 "$T" -test.run 'TestPtxasInfo' -test.v > "$OUT/ptxas.log" 2>&1
log "ptxas exit $?"
grep -iE "registers|spill|warn|error|serializ" "$OUT/ptxas.log" | head -30 | tee -a "$OUT/summary.txt"
log "tests ${TESTS:=TestExpertsWG$|TestExpertsLt$|TestExpertsGroupedBits|TestKernelsCompile}"
timeout 240 "$T" -test.run "$TESTS" -test.short -test.v > "$OUT/wg_test.log" 2>&1
log "tests exit $? ($(grep -c -- '--- PASS' "$OUT/wg_test.log") passed, $(grep -c -- '--- FAIL' "$OUT/wg_test.log") failed)"
grep -E -- "--- FAIL|^FAIL|^ok|panic|max \|diff\||differ|want" "$OUT/wg_test.log" | head -60 >> "$OUT/summary.txt"
if [[ ${TIMING:-1} != 0 ]]; then
  log "timing"
  timeout "${TIMING_LIMIT:-300}" "$T" -test.run 'TestExpertsWGTiming' -test.v > "$OUT/wg_timing.log" 2>&1
  log "timing exit $?"
  grep -E "TIMING|registers|max \|diff\||FAIL|panic" "$OUT/wg_timing.log" | tee -a "$OUT/summary.txt"
fi
cat "$OUT/steps.txt"
