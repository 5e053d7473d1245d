#!/usr/bin/env python3
"""Writes the goldens the Go engine's tests compare against.

    write_goldens.py MODEL_DIR INPUT_JSON OUT_DIR [--precisions fp32,bf16] [--device cpu|cuda] [--kda step|chunk]

INPUT_JSON is {"sequences": [[token ids], ...]}. For each precision P this writes OUT_DIR/golden-P.json, and for
fp32 also OUT_DIR/hidden-fp32.f32 (little-endian float32 [layers][tokens of all sequences, concatenated in
input order][hidden] of p after each layer). The schema is in README.md beside this file.
"""

import argparse
import hashlib
import json
import os
import sys
import time

import numpy as np
import torch

import checkpoint as ckpt_mod
import k3_ref
import safetensors_io

TOP_K = 8


def golden(ck, sequences, precision, device, kda_impl, log):
    t0 = time.time()
    record = precision == "fp32"
    results = k3_ref.run(ck, sequences, precision, device, kda_impl, record_hidden=record, top_k=TOP_K, log=log)
    cfg = ck.config
    n_tokens = sum(len(s) for s in sequences)
    sum_sq = np.zeros(cfg.num_layers)
    for r in results:
        sum_sq += np.array(r["sum_sq"])
    doc = {
        "model_dir_config_sha256": hashlib.sha256(ck.config_bytes).hexdigest(),
        "precision": precision,
        "torch_version": torch.__version__,
        "reader": safetensors_io.reader_kind(),
        "device": str(device),
        "kda_impl": kda_impl,
        "top_k": TOP_K,
        "num_layers": cfg.num_layers,
        "moe_layers": cfg.moe_layers(),
        "router_k": cfg.top_k,
        "sequences": [{
            "ids": list(ids),
            "logprob": r["logprob"],
            "entropy": r["entropy"],
            "topk_ids": r["topk_ids"],
            "topk_logprobs": r["topk_logprobs"],
            "router": r["router"],
            "router_weights": r["router_weights"],
        } for ids, r in zip(sequences, results)],
        "layer_rms": [float(np.sqrt(s / (n_tokens * cfg.hidden))) for s in sum_sq],
    }
    hidden = None
    if record:
        hidden = torch.cat([r["hidden"] for r in results], dim=1)  # [layers, tokens, hidden]
        doc["hidden_shape"] = list(hidden.shape)
        doc["hidden_file"] = "hidden-fp32.f32"
    return doc, hidden, time.time() - t0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model_dir")
    ap.add_argument("input_json")
    ap.add_argument("out_dir")
    ap.add_argument("--precisions", default="fp32,bf16")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--kda", default="step", choices=["step", "chunk"])
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)

    with open(args.input_json) as f:
        sequences = json.load(f)["sequences"]
    if not sequences or not all(isinstance(s, list) and s for s in sequences):
        sys.exit("%s: want {\"sequences\": [[ids...], ...]} with non-empty sequences" % args.input_json)
    ck = ckpt_mod.Checkpoint(args.model_dir)
    ck.validate()
    os.makedirs(args.out_dir, exist_ok=True)
    log = None if args.quiet else (lambda s: print(s, file=sys.stderr))
    for precision in args.precisions.split(","):
        doc, hidden, seconds = golden(ck, sequences, precision, args.device, args.kda, log)
        if hidden is not None:
            path = os.path.join(args.out_dir, "hidden-fp32.f32")
            hidden.numpy().astype("<f4").tofile(path)
        path = os.path.join(args.out_dir, "golden-%s.json" % precision)
        with open(path, "w") as f:
            json.dump(doc, f)
            f.write("\n")
        print("wrote %s (%d sequences, %d tokens, %.2fs)" % (path, len(sequences), sum(map(len, sequences)),
                                                           seconds), file=sys.stderr)


if __name__ == "__main__":
    main()
