# the device command of run 80 (from the repository root)
python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' .dev/i/cuda.test.xz /tmp/ptxas.test
chmod +x /tmp/ptxas.test
(cd cuda && POTATO_PTXAS_FILE=mla_wg.cu POTATO_CUDA_ARCH=sm_90a timeout 80 /tmp/ptxas.test -test.run TestPtxasInfo -test.v > "$OUT/ptxas_mla_wg.log" 2>&1)
DEADLINE=460 PLAN=docs/records/run80/plan.txt bash scripts/gpu_variants.sh
cd "$OUT" && for d in bench_*; do [ -d "$d" ] && tar czf "$d.tgz" "$d" && rm -rf "$d"; done; true
