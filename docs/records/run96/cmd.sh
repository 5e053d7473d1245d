# the device command of run 96 (from the repository root)
DEADLINE=560 PLAN=docs/records/run96/plan.txt bash scripts/gpu_variants.sh; ls "$OUT"
