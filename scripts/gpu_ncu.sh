#!/usr/bin/env bash
# Nsight Compute on one launch of a kernel, on the GPU machine (ncu is /usr/local/cuda/bin/ncu there; no
# nsys), the clocks left as they run. Build a cuda test binary here first and carry it (raw, .xz or .gz), e.g.
#   mkdir -p .dev/prof && CGO_ENABLED=0 go test -c -trimpath -ldflags='-s -w' -o .dev/prof/cuda.test ./cuda
#   xz -9 -T4 .dev/prof/cuda.test   # optional: about 1.8 MB packed, 5.5 raw (a call carries 64 MiB)
#   run(command="bash scripts/gpu_ncu.sh kda 'k_kda_chunk_r128$' 0 'TestKDATiming$'", carry=[".dev/prof"])
# Arguments: NAME (the output files' prefix), a kernel name regex, how many of its launches to skip (the
# timing tests launch the small waves first), the -test.run pattern that launches it. Writes, under $OUT:
#   NAME_details.txt  every section of ncu's full set with its details (stall reasons, pipes, memory)
#   NAME_sass.csv.gz  the SASS with per-instruction stall samples and counts (scripts/sass_regions.py
#                     sums it by phase: the regions between a kernel's barriers)
#   NAME_run.txt      ncu's own log
# docs/records/run106 is the first use (KDA's chunked kernel and MLA's wgmma kernel). BIN (default
# .dev/prof/cuda.test) names another binary.
set -uo pipefail
NAME=${1:?NAME}; KERNEL=${2:?kernel regex}; SKIP=${3:-0}; TEST=${4:?test pattern}
OUT=${OUT:-/tmp/out}; BIN=${BIN:-.dev/prof/cuda.test}
mkdir -p "$OUT"
B=$(mktemp -d)/cuda.test
if [[ -f $BIN ]]; then cp "$BIN" "$B"
elif [[ -f $BIN.xz ]]; then # python's lzma where xz is not installed
  xz -dc "$BIN.xz" > "$B" 2> /dev/null ||
    python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), sys.stdout.buffer)' "$BIN.xz" > "$B"
elif [[ -f $BIN.gz ]]; then gunzip -c "$BIN.gz" > "$B"
else echo "no test binary at $BIN (.xz, .gz)"; exit 1
fi
chmod +x "$B"
command -v ncu > /dev/null || { echo "no ncu on this machine"; exit 1; }
cd cuda || exit 1 # the tests read their testdata from the package folder
timeout 300 ncu --target-processes all --clock-control none -k "regex:$KERNEL" --launch-skip "$SKIP" -c 1 \
  --set full --import-source no -o "/tmp/$NAME" -f "$B" -test.run "$TEST" > "$OUT/${NAME}_run.txt" 2>&1
ncu --import "/tmp/$NAME.ncu-rep" --print-details all > "$OUT/${NAME}_details.txt" 2>&1
ncu --import "/tmp/$NAME.ncu-rep" --page source --print-source sass --csv 2> /dev/null | gzip -9 > "$OUT/${NAME}_sass.csv.gz"
ls -la "$OUT"
