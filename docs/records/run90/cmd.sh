# the device command of run 90 (from the repository root)
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv -lms 250 > "$OUT/clocks.csv" 2>&1 &
POTATO_KDA_SHAPES=16x4096,1x65536 DEADLINE=570 PLAN=docs/records/run90/plan.txt bash scripts/gpu_variants.sh; kill %1; ls "$OUT"
