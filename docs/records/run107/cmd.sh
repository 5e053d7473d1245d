# the device command of run 107 (from the repository root): the plan, then Nsight Compute on one launch of
# n's KDA chunked kernel (16 x 4,096 tokens), as run 106 profiled b's
DEADLINE=420 PLAN=docs/records/run107/plan.txt bash scripts/gpu_variants.sh
cd cuda && timeout 120 ncu --target-processes all --clock-control none -k 'regex:k_kda_chunk_r128$' -c 1 --set full \
  --import-source no -o /tmp/kda -f /tmp/variants/n.cuda.test -test.run 'TestKDATiming$' > /dev/null 2>&1
ncu --import /tmp/kda.ncu-rep --print-details all > "$OUT/kda_details.txt" 2>&1
ncu --import /tmp/kda.ncu-rep --page source --print-source sass --csv 2> /dev/null | gzip -9 > "$OUT/kda_sass.csv.gz"
ls "$OUT"
