DEADLINE=570 PLAN=docs/records/run120/plan.txt bash scripts/gpu_variants.sh; ls "$OUT"
