# the device command of run 82 (from the repository root); the call returns at most 8 files, so the step
# logs and bench folders come back in one archive beside the summaries
python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' .dev/k/cuda.test.xz /tmp/ptxas.test
chmod +x /tmp/ptxas.test
(cd cuda && POTATO_PTXAS_FILE=mla_wg.cu POTATO_CUDA_ARCH=sm_90a timeout 80 /tmp/ptxas.test -test.run TestPtxasInfo -test.v > "$OUT/ptxas_mla_wg.log" 2>&1)
DEADLINE=450 PLAN=docs/records/run82/plan.txt bash scripts/gpu_variants.sh
cd "$OUT" && mkdir -p /tmp/logs82 && mv ./[0-9]*_*.log bench_* gpu.txt /tmp/logs82/ 2>/dev/null; tar czf "$OUT/logs.tgz" -C /tmp/logs82 . ; ls "$OUT"
