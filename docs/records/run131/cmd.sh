DEADLINE=230 PLAN=docs/records/next/plan3.txt bash scripts/gpu_variants.sh   # carry .dev/bundle.tar.xz (as run 129)
