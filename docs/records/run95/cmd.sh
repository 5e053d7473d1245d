# the device command of run 95 (from the repository root)
DEADLINE=230 PLAN=docs/records/run95/plan.txt bash scripts/gpu_variants.sh; ls "$OUT"
