# the device command of run 100 (from the repository root)
DEADLINE=300 PLAN=docs/records/run100/plan.txt bash scripts/gpu_variants.sh; ls "$OUT"
