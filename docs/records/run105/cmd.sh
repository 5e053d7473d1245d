# the device command of run 105 (from the repository root): is a profiler installed (ncu, nsys)? then
# the plan; then, where ncu exists, one launch each of MLA's wgmma kernel and KDA's chunked kernel
# profiled (stall reasons, pipe use, shared memory).
{ for p in ncu nsys nvcc; do command -v $p || echo "no $p"; done; ls -d /usr/local/cuda*/ /opt/nvidia* 2>/dev/null;
  nvidia-smi -q -d PERFORMANCE,CLOCK | head -40; } > "$OUT/probe.txt" 2>&1
DEADLINE=440 PLAN=docs/records/run105/plan.txt bash scripts/gpu_variants.sh
if command -v ncu > /dev/null; then
  cd cuda && B=/tmp/variants/a.cuda.test
  timeout 100 ncu --target-processes all -k regex:k_mla_wg_192 --launch-skip 30 -c 1 --section SpeedOfLight \
    --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
    --section Occupancy "$B" -test.run 'TestMLATiming$' > "$OUT/ncu_mla.txt" 2>&1
  timeout 100 ncu --target-processes all -k regex:k_kda_chunk_r128 -c 1 --section SpeedOfLight --section WarpStateStats \
    --section SchedulerStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section Occupancy \
    "$B" -test.run 'TestKDATiming$' > "$OUT/ncu_kda.txt" 2>&1
  cd ..
fi
ls "$OUT"
