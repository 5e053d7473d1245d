# the device command of run 92 (from the repository root)
POTATO_KDA_SHAPES=16x4096 DEADLINE=400 PLAN=docs/records/run92/plan.txt bash scripts/gpu_variants.sh; ls "$OUT"
