# the device command of run 84 (from the repository root): k_mla_prep's time at 16 x 4,096 tokens and 96
# heads (TestMLAPrepTiming), with build k of run 82
python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' .dev/k/cuda.test.xz /tmp/k.test
chmod +x /tmp/k.test
(cd cuda && timeout 100 /tmp/k.test -test.v -test.run 'TestMLAPrepTiming' > "$OUT/1_k_cuda.log" 2>&1); echo "exit $?" >> "$OUT/1_k_cuda.log"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$OUT/gpu.txt"
