# the device command of run 94 (from the repository root)
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv -lms 250 > "$OUT/clocks.csv" 2>&1 &
DEADLINE=540 PLAN=docs/records/run94/plan.txt bash scripts/gpu_variants.sh; kill %1; ls "$OUT"
