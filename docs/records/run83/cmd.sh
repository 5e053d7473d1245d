# the device command of run 83 (from the repository root)
DEADLINE=400 PLAN=docs/records/run83/plan.txt bash scripts/gpu_variants.sh
cd "$OUT" && mkdir -p /tmp/logs83 && mv ./[0-9]*_*.log gpu.txt /tmp/logs83/ 2>/dev/null; tar czf "$OUT/logs.tgz" -C /tmp/logs83 . ; ls "$OUT"
