DEADLINE=580 PLAN=docs/records/run121/plan.txt bash scripts/gpu_variants.sh; ls "$OUT"
