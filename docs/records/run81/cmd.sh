# the device command of run 81 (from the repository root); the call returns at most 8 files, so the logs
# and bench folders come back in one archive beside the summaries
python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' .dev/j/cuda.test.xz /tmp/ptxas.test
chmod +x /tmp/ptxas.test
(cd cuda && POTATO_PTXAS_FILE=mla_wg.cu POTATO_CUDA_ARCH=sm_90a timeout 80 /tmp/ptxas.test -test.run TestPtxasInfo -test.v > "$OUT/ptxas_mla_wg.log" 2>&1)
DEADLINE=460 PLAN=docs/records/run81/plan.txt bash scripts/gpu_variants.sh
cd "$OUT" && tar czf logs.tgz --exclude=logs.tgz --exclude=summary.txt --exclude=steps.txt --exclude=timing.txt --exclude=ptxas_mla_wg.log . && find . -mindepth 1 -not -name logs.tgz -not -name summary.txt -not -name steps.txt -not -name timing.txt -not -name ptxas_mla_wg.log -delete; true
