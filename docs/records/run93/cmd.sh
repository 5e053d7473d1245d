# the device command of run 93 (from the repository root)
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv -lms 250 > "$OUT/clocks.csv" 2>&1 &
POTATO_KDA_SHAPES=16x4096 DEADLINE=560 PLAN=docs/records/run93/plan.txt bash scripts/gpu_variants.sh; kill %1; ls "$OUT"
