#!/usr/bin/env bash
# Checks against implementations nobody here wrote, run on the GPU machine (PyTorch 2.11, transformers 5.17,
# tiktoken 0.14 there; no Go): build .dev/potato here first (CGO_ENABLED=0 go build -o .dev/potato ./cmd/potato)
# and carry it. Writes under $OUT:
#   tiktoken_golden_ids.txt.gz   Python tiktoken's ids for the tokenizer corpus (commit to replay/tokenizer/testdata/)
#   module_checks.json           transformers' Kimi Linear KDA, MXFP4 and SiTU against k3_ref (commit to k3_ref/records/)
#   ref_cuda_vs_cpu_seed*.json   k3_ref on CUDA + torch 2.11 against the committed CPU goldens
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
status=0
run() { echo "+ $*"; "$@" || { echo "FAILED ($?): $*"; status=1; }; }
python3 -c 'import torch, transformers, tiktoken; print("torch", torch.__version__, "transformers", transformers.__version__, "tiktoken", tiktoken.__version__, "cuda", torch.cuda.is_available())'
run python3 replay/tokenizer/testdata/tiktoken_golden.py replay/tokenizer/testdata/golden.tiktoken.model \
    replay/tokenizer/testdata/tiktoken_corpus.jsonl.gz "$OUT/tiktoken_golden_ids.txt.gz"
run python3 k3_ref/module_checks.py "$OUT/module_checks.json" --device cuda
for s in 1 2; do
  rm -rf /tmp/g$s /tmp/cuda$s
  run .dev/potato synth --preset tiny --seed $s --out /tmp/g$s
  run python3 k3_ref/write_goldens.py /tmp/g$s replay/testdata/goldens/tiny-seed$s/input.json /tmp/cuda$s --device cuda --quiet
  run python3 k3_ref/compare.py replay/testdata/goldens/tiny-seed$s /tmp/cuda$s --json "$OUT/ref_cuda_vs_cpu_seed$s.json"
done
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
exit $status
