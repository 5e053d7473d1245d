DEADLINE=560 PLAN=docs/records/run118/plan.txt bash scripts/gpu_variants.sh; ls "$OUT"
