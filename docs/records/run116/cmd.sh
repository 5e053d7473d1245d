DEADLINE=300 PLAN=docs/records/run116/plan.txt bash scripts/gpu_variants.sh; ls "$OUT"
