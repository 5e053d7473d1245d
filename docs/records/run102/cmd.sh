# the device command of run 102 (from the repository root)
DEADLINE=300 PLAN=docs/records/run102/plan.txt bash scripts/gpu_variants.sh; ls "$OUT"
