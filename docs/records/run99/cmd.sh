# the device command of run 99 (from the repository root)
DEADLINE=560 PLAN=docs/records/run99/plan.txt bash scripts/gpu_variants.sh; ls "$OUT"
