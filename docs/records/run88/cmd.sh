# the device command of run 88 (from the repository root)
DEADLINE=540 PLAN=docs/records/run88/plan.txt bash scripts/gpu_variants.sh; ls "$OUT"
