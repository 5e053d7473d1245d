DEADLINE=585 PLAN=docs/records/run122/plan.txt bash scripts/gpu_variants.sh; ls "$OUT"
