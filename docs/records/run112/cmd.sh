DEADLINE=590 PLAN=docs/records/run112/plan.txt bash scripts/gpu_variants.sh; ls "$OUT"
