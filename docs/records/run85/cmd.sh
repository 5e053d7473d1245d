# the device command of run 85 (from the repository root)
DEADLINE=570 PLAN=docs/records/run85/plan.txt bash scripts/gpu_variants.sh; ls "$OUT"
