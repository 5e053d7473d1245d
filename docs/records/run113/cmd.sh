DEADLINE=280 PLAN=docs/records/run113/plan.txt bash scripts/gpu_variants.sh; ls "$OUT"
