# the device command of run 89 (from the repository root)
DEADLINE=280 PLAN=docs/records/run89/plan.txt bash scripts/gpu_variants.sh; ls "$OUT"
