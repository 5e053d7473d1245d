# the device command of run 86 (from the repository root): the plan, the GPU's clocks and power sampled
# every 250 ms beside it, then ptxas's report for norm.cu
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv -lms 250 > "$OUT/clocks.csv" 2>&1 &
DEADLINE=540 PLAN=docs/records/run86/plan.txt bash scripts/gpu_variants.sh; kill %1
(cd cuda && POTATO_PTXAS_FILE=norm.cu POTATO_CUDA_ARCH=sm_90a timeout 40 /tmp/variants/bundle/n/cuda.test -test.run TestPtxasInfo -test.v > "$OUT/ptxas_norm.log" 2>&1); ls "$OUT"
