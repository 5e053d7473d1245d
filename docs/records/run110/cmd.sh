DEADLINE=590 PLAN=docs/records/run110/plan.txt bash scripts/gpu_variants.sh; ls "$OUT"
