# the device command of run 103 (from the repository root)
DEADLINE=210 PLAN=docs/records/run103/plan.txt bash scripts/gpu_variants.sh; ls "$OUT"
