# the device command of run 98 (from the repository root)
DEADLINE=560 PLAN=docs/records/run98/plan.txt bash scripts/gpu_variants.sh; ls "$OUT"
