# the device command of run 108 (from the repository root)
DEADLINE=300 PLAN=docs/records/run108/plan.txt bash scripts/gpu_variants.sh; ls "$OUT"
