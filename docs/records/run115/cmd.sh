DEADLINE=540 PLAN=docs/records/run115/plan.txt bash scripts/gpu_variants.sh; ls "$OUT"
