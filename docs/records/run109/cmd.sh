# the device command of run 109 (from the repository root)
DEADLINE=590 PLAN=docs/records/run109/plan.txt bash scripts/gpu_variants.sh; ls "$OUT"
