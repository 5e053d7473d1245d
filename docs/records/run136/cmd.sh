DEADLINE=400 PLAN=docs/records/next/plan_1m.txt bash scripts/gpu_variants.sh   # carry .dev/bundle.tar.xz: scripts/gpu_bundle.sh s=main (c99854b); asked for nvidia-h200, ran on an H100 80GB
