#!/usr/bin/env bash
# A/B of the cuBLASLt expert path on the H200: TestExpertsPooledTiming (a pooled call at 262,144 tokens x
# 16, five schedule settings, each checked bit for bit against the first) from several test binaries, the
# baseline's and the changes', in turns. Build here first (go test -c ./cuda for each tree), gzipped:
#   .dev/<variant>/cuda.test.gz for each of VARIANTS (default "before after"), and carry those folders.
# ROUNDS (default 1) turns over the variants; RUN (default TestExpertsPooledTiming) the -test.run pattern.
# Writes $OUT/experts_ab.txt (every TIMING line, tagged) and each run's log.
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT" /tmp/ab
for v in ${VARIANTS:-before after}; do
  rm -f "/tmp/ab/$v.test"
  gunzip -c ".dev/$v/cuda.test.gz" > "/tmp/ab/$v.test" && chmod +x "/tmp/ab/$v.test"
done
ROOT=$(pwd)
for r in $(seq 1 "${ROUNDS:-1}"); do
  for v in ${VARIANTS:-before after}; do
    (cd "$ROOT/cuda" && timeout 200 "/tmp/ab/$v.test" -test.v -test.run "${RUN:-TestExpertsPooledTiming}" > "$OUT/ab_${v}_$r.log" 2>&1)
    echo "== $v round $r exit $?" >> "$OUT/experts_ab.txt"
    grep -E "TIMING|FAIL|differ" "$OUT/ab_${v}_$r.log" | sed "s/^/$v: /" >> "$OUT/experts_ab.txt"
  done
done
cat "$OUT/experts_ab.txt"
