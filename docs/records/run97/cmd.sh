# the device command of run 97 (from the repository root)
DEADLINE=580 PLAN=docs/records/run97/plan.txt bash scripts/gpu_variants.sh; ls "$OUT"
