DEADLINE=300 PLAN=docs/records/run119/plan.txt bash scripts/gpu_variants.sh; ls "$OUT"
