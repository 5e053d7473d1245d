"""Conditioning of a synthetic model at K3's dimensions: k3_ref's bf16 vs fp32 forward on CUDA.

    potato synth --preset k3-layer --layers 3 --out /tmp/k3l          # 40.6 GB, dense
    python3 replay/synth/testdata/k3_layer_conditioning.py /tmp/k3l INPUT_JSON OUT_DIR

Run from the repository root. INPUT_JSON is {"sequences": [[ids], ...]} as for k3_ref/write_goldens.py.
Prints (and writes OUT_DIR/k3layer-conditioning.json): top-1 agreement, |delta logprob|, router sets that
differ, the entropy spread, the top-1 gap, and the smallest gap between the k-th and (k+1)-th router selection
score (sigmoid + bias) seen in fp32. For tiny and small, k3_ref/write_goldens.py and compare.py give the same
agreement figures on the CPU; this script exists because at K3 size the experts must be decoded on the GPU.
"""
import json, math, os, sys, time
sys.path.insert(0, "k3_ref")
import torch
import checkpoint as ck
import k3_ref

model, inp, out = sys.argv[1], sys.argv[2], sys.argv[3]
dev = "cuda"
orig = ck.decode_mxfp4
def on_gpu(packed, scale, name="?"):
    return orig(packed.to(dev), scale.to(dev), name)
ck.decode_mxfp4 = on_gpu
k3_ref.ckpt_mod.decode_mxfp4 = on_gpu
seqs = json.load(open(inp))["sequences"]
ckpt = ck.Checkpoint(model)
gaps = []
orig_route = k3_ref.route
def route(cfg, x, w, bias, forced=None):
    s = torch.sigmoid(torch.matmul(x, w.t())) + bias
    srt, _ = torch.sort(s, dim=-1, descending=True)
    gaps.append((srt[:, cfg.top_k - 1] - srt[:, cfg.top_k]).double().cpu())
    return orig_route(cfg, x, w, bias, forced)
k3_ref.route = route
res = {}
for prec in ("fp32", "bf16"):
    t0 = time.time()
    res[prec] = k3_ref.run(ckpt, seqs, precision=prec, device=dev, top_k=2, log=lambda m: print(prec, m, flush=True))
    print(prec, "%.1fs" % (time.time() - t0), flush=True)
a, b = res["fp32"], res["bf16"]
top1 = n = 0; dl = []; flips = pairs = 0; ent = []; gp = []
for ra, rb in zip(a, b):
    for t in range(len(ra["topk_ids"])):
        n += 1; top1 += ra["topk_ids"][t][0] == rb["topk_ids"][t][0]
        ent.append(ra["entropy"][t]); gp.append(ra["topk_logprobs"][t][0] - ra["topk_logprobs"][t][1])
    dl += [abs(x - y) for x, y in zip(ra["logprob"], rb["logprob"])]
    for t in range(len(ra["router"])):
        for la, lb in zip(ra["router"][t], rb["router"][t]):
            pairs += 1; flips += set(la) != set(lb)
ent.sort(); gp.sort()
q = lambda xs, f: xs[min(len(xs) - 1, int(f * len(xs)))]
g = torch.cat(gaps)
summary = {
    "tokens": n, "top1_agreement": top1 / n, "mean_abs_delta_logprob": sum(dl) / len(dl), "max_abs_delta_logprob": max(dl),
    "router_pairs": pairs, "router_set_flips": flips,
    "entropy": [ent[0], q(ent, .1), q(ent, .5), q(ent, .9), ent[-1]],
    "top1_gap_p01_p10_p50": [q(gp, .01), q(gp, .1), q(gp, .5)],
    "selection_gap_min_p001_p50": [float(g.min()), float(g.quantile(0.001)), float(g.median())],
    "layer_rms_fp32": [math.sqrt(s / (sum(len(x) for x in seqs) * ckpt.config.hidden)) for s in
                       [sum(r["sum_sq"][i] for r in a) for i in range(ckpt.config.num_layers)]],
}
print(json.dumps(summary, indent=1))
json.dump(summary, open(os.path.join(out, "k3layer-conditioning.json"), "w"), indent=1)
