#!/usr/bin/env bash
# The CUDA backend's agreement checks on the GPU machine, in one call. Build the test binaries here first
# (the GPU machine has no Go) and carry .dev/gpu:
#   mkdir -p .dev/gpu
#   CGO_ENABLED=0 go test -c -trimpath -ldflags='-s -w' -o .dev/gpu/cuda.test ./cuda/
#   CGO_ENABLED=0 go test -c -trimpath -ldflags='-s -w' -o .dev/gpu/replay.test ./replay/
# Runs: the ops conformance suite on CUDA in both precisions, CUDA vs CPU op by op, batch invariance, the
# kernel cache (cuda.test); the engine on CUDA vs CPU on the tiny and small presets and batch invariance
# of whole replays (replay.test). cuda/records/JOURNAL.md records the figures of each run.
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
status=0
(cd cuda && ../.dev/gpu/cuda.test -test.v 2>&1) | tee "$OUT/cuda_test.log" | grep -E '^(=== RUN|--- (PASS|FAIL|SKIP)|PASS|FAIL|ok)' | grep -v '=== RUN' | tail -60 || status=1
grep -q '^FAIL' "$OUT/cuda_test.log" && status=1
(cd replay && ../.dev/gpu/replay.test -test.v -test.run 'CUDA' 2>&1) | tee "$OUT/replay_cuda_test.log" | grep -E '(--- (PASS|FAIL)|top-1|rel err|^ok|^FAIL)' | tail -40
grep -q '^FAIL' "$OUT/replay_cuda_test.log" && status=1
exit $status
