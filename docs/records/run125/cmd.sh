DEADLINE=340 PLAN=docs/records/run125/plan.txt bash scripts/gpu_variants.sh; ls "$OUT"
