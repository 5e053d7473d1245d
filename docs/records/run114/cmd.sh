DEADLINE=480 PLAN=docs/records/run114/plan.txt bash scripts/gpu_variants.sh; ls "$OUT"
