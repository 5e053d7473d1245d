DEADLINE=340 PLAN=docs/records/next/plan_short.txt bash scripts/gpu_variants.sh   # carry .dev/bundle.tar.xz: scripts/gpu_bundle.sh h=7b654b0 s=exp/state-prefetch (f27173c); ran on an H100 80GB
