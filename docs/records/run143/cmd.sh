DEADLINE=225 PLAN=plan.txt bash scripts/gpu_variants.sh   # the bundle of run 142, on the same H200 while it was warm
