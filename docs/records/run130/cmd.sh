DEADLINE=420 PLAN=docs/records/next/plan2.txt bash scripts/gpu_variants.sh   # carry .dev/bundle.tar.xz (as run 129)
