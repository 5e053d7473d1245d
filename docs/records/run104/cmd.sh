# the device command of run 104 (from the repository root); TestPtxasInfo reports on mla_wg.cu for sm_90a
POTATO_PTXAS_FILE=mla_wg.cu POTATO_CUDA_ARCH=sm_90a DEADLINE=560 PLAN=docs/records/run104/plan.txt bash scripts/gpu_variants.sh; ls "$OUT"
