# the device command of run 106 (from the repository root): Nsight Compute on one launch each of KDA's
# chunked kernel (16 x 4,096 tokens, 96 heads) and MLA's wgmma kernel (16 x 4,096, a group of 25 heads),
# the clocks left as they run (--clock-control none): every section with its details, and the SASS with
# per-instruction samples (CSV). Build: the session's HEAD (411b793) with TestKDATiming's HASH line.
set -u
mkdir -p /tmp/v && python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' .dev/bundle.tar.xz /tmp/v
B=/tmp/v/n/cuda.test; chmod +x $B; cd cuda
prof() { # NAME KERNEL SKIP TEST
  timeout 200 ncu --target-processes all --clock-control none -k "regex:$2" --launch-skip "$3" -c 1 --set full \
    --import-source no -o "/tmp/$1" -f "$B" -test.run "$4" > "$OUT/$1_run.txt" 2>&1
  ncu --import "/tmp/$1.ncu-rep" --print-details all > "$OUT/$1_details.txt" 2>&1
  ncu --import "/tmp/$1.ncu-rep" --page source --print-source sass --csv 2> /dev/null | gzip -9 > "$OUT/$1_sass.csv.gz"
}
prof kda 'k_kda_chunk_r128$' 0 'TestKDATiming$'
prof mla 'k_mla_wg_192_128' 30 'TestMLATiming$'
ls -la "$OUT"
