# the device command of run 101 (from the repository root)
DEADLINE=300 PLAN=docs/records/run101/plan.txt bash scripts/gpu_variants.sh; ls "$OUT"
