DEADLINE=560 PLAN=docs/records/run128/plan.txt bash scripts/gpu_variants.sh; ls "$OUT"
