DEADLINE=560 PLAN=docs/records/next/plan.txt bash scripts/gpu_variants.sh   # carry .dev/bundle.tar.xz: scripts/gpu_bundle.sh h=7b654b0 s=main (b51e3fb); asked for nvidia-h200, ran on an H100 80GB
