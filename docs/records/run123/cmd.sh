DEADLINE=400 PLAN=docs/records/run123/plan.txt bash scripts/gpu_variants.sh; ls "$OUT"
