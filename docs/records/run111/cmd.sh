DEADLINE=590 PLAN=docs/records/run111/plan.txt bash scripts/gpu_variants.sh; ls "$OUT"
