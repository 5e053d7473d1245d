DEADLINE=420 PLAN=docs/records/run124/plan.txt bash scripts/gpu_variants.sh; ls "$OUT"
