#!/usr/bin/env bash
# Several devices sharing one weight stream (--devices, issue 19), checked on ONE GPU by opening device 0
# twice or three times (--devices 0,0 and 0,0,0: separate backends, each with its own CUDA thread,
# streams and pinned-buffer registry, fed by one reader). Build here first (the GPU machine has no Go) and
# carry .dev/gpu:
#   mkdir -p .dev/gpu
#   CGO_ENABLED=0 go test -c -trimpath -ldflags='-s -w' -o .dev/gpu/replay.test ./replay/
#   CGO_ENABLED=0 go test -c -trimpath -ldflags='-s -w' -o .dev/gpu/cuda.test ./cuda/
#   CGO_ENABLED=0 go test -c -trimpath -ldflags='-s -w' -o .dev/gpu/potato.test ./cmd/potato/
#   CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o .dev/gpu/potato ./cmd/potato
#   gzip -f .dev/gpu/*     # 117 MB of binaries, 37 MB gzipped: under the 64 MiB a call carries
# What passes means:
#   cuda.test TestAdoptHost: a backend copies from another's pinned buffer directly, never frees it;
#   replay.test TestCUDADevices: tiny and small presets, bf16 and fp32, sliced and chunked, host cache:
#     every sequence bit-identical over 2 or 3 backends to one backend, checkpoint bytes read once
#     ("checkpoint bytes read: N over 2 backends, N on one" in the log);
#   replay.test TestDevices*: the same orchestration on CPU backends (faults, cancel, split waves);
#   potato.test TestReplayDevices: `potato replay --backend cuda --devices 0,0` and 0,0,0 write every
#     table row for row as --devices 0;
#   then a bench of the small preset with --devices 0 and 0,0 (plan lines, per-device shares, times;
#     on one GPU the two contexts share its copy link, so 0,0 is not expected to be faster).
# K3=1 adds the k3-layer bench (one layer of each kind at K3's sizes) with --devices 0 and 0,0.
set -uo pipefail
OUT=${OUT:-/tmp/out}
BIN=${BIN:-.dev/gpu}
mkdir -p "$OUT"
status=0
if ls "$BIN"/*.gz >/dev/null 2>&1; then # carried gzipped: unpack beside the run
  mkdir -p /tmp/devbin && for f in "$BIN"/*.gz; do gunzip -c "$f" > "/tmp/devbin/$(basename "${f%.gz}")"; done
  chmod +x /tmp/devbin/* && BIN=/tmp/devbin
fi
case "$BIN" in /*) ;; *) BIN="$PWD/$BIN" ;; esac
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/devices.txt"
(cd cuda && "$BIN/cuda.test" -test.v -test.run 'TestAdoptHost$' 2>&1) | tee "$OUT/devices_cuda.log" | grep -E '^(--- |ok|FAIL|PASS)'
grep -q -- '--- FAIL\|^FAIL' "$OUT/devices_cuda.log" && status=1
(cd replay && "$BIN/replay.test" -test.v -test.run 'TestCUDADevices|TestDevices' 2>&1) | tee "$OUT/devices_replay.log" \
  | grep -E '(--- (PASS|FAIL|SKIP)|bit-identical|backend [0-9] ran|^ok|^FAIL|^PASS)' | tail -80
grep -q -- '--- FAIL\|^FAIL' "$OUT/devices_replay.log" && status=1
grep -q -- '--- SKIP: TestCUDADevices' "$OUT/devices_replay.log" && { echo "TestCUDADevices skipped: no CUDA here?"; status=1; }
(cd cmd/potato && "$BIN/potato.test" -test.v -test.run 'TestReplayDevices|TestDevicesFlag' 2>&1) | tee "$OUT/devices_cmd.log" | grep -E '^(--- |ok|FAIL|PASS)|devices [0-9] of'
grep -q -- '--- FAIL\|^FAIL' "$OUT/devices_cmd.log" && status=1
for devs in 0 0,0; do
  echo "== bench small, --devices $devs" | tee -a "$OUT/devices.txt"
  timeout 300 "$BIN/potato" bench --backend cuda --preset small --tokens 4096,16384 --seq-len 1024 --repeat 1 \
    --devices "$devs" 2>&1 | grep -E '^(plan|wave of|over|bench)' | tee -a "$OUT/devices.txt"
done
if [ "${K3:-0}" = 1 ]; then
  "$BIN/potato" synth --preset k3-layer --layers 3 --seed 1 --out /tmp/k3layer 2>&1 | tail -1
  for devs in 0 0,0; do
    echo "== bench k3-layer, --devices $devs" | tee -a "$OUT/devices.txt"
    timeout 480 "$BIN/potato" bench --backend cuda --model /tmp/k3layer --tokens 16384 --seq-len 4096 --repeat 1 \
      --expert-chunk 128 --bound-flops 790e12 --bound-bandwidth 55e9 --devices "$devs" 2>&1 \
      | grep -E '^(plan|wave of|over|bench)' | tee -a "$OUT/devices.txt"
  done
fi
exit $status
