#!/usr/bin/env python3
"""Compares two goldens: top-1 agreement, |delta logprob|, |delta entropy|, router choices that differ.

    compare.py DIR                 golden-fp32.json vs golden-bf16.json of one directory
    compare.py A B                 two golden files, or two directories (every precision present in both)
    compare.py ... --json OUT      also write the numbers as JSON

A golden's own fp32 vs bf16 measures how well-conditioned a (synthetic) model is: on a chaotic model small
rounding differences flip router choices and top-1 predictions. The sequences must be the same token ids.
"""

import argparse
import json
import os


def load(path):
    with open(path) as f:
        return json.load(f)


def compare_docs(a, b):
    """Returns a dict of agreement numbers between two golden documents."""
    if len(a["sequences"]) != len(b["sequences"]):
        raise ValueError("different sequence counts: %d vs %d" % (len(a["sequences"]), len(b["sequences"])))
    top1_same = top1_n = 0
    dlp, dent = [], []
    router_diff_set = router_diff_order = router_n = 0
    for i, (sa, sb) in enumerate(zip(a["sequences"], b["sequences"])):
        if sa["ids"] != sb["ids"]:
            raise ValueError("sequence %d: different token ids" % i)
        for ta, tb in zip(sa["topk_ids"], sb["topk_ids"]):
            top1_n += 1
            top1_same += ta[0] == tb[0]
        dlp += [abs(x - y) for x, y in zip(sa["logprob"], sb["logprob"])]
        dent += [abs(x - y) for x, y in zip(sa["entropy"], sb["entropy"])]
        for ra, rb in zip(sa["router"], sb["router"]):  # per position
            for la, lb in zip(ra, rb):  # per MoE layer
                router_n += 1
                router_diff_set += set(la) != set(lb)
                router_diff_order += la != lb
    out = {
        "a_precision": a.get("precision"),
        "b_precision": b.get("precision"),
        "tokens": top1_n,
        "top1_agreement": top1_same / top1_n if top1_n else None,
        "mean_abs_delta_logprob": sum(dlp) / len(dlp) if dlp else None,
        "max_abs_delta_logprob": max(dlp) if dlp else None,
        "mean_abs_delta_entropy": sum(dent) / len(dent) if dent else None,
        "max_abs_delta_entropy": max(dent) if dent else None,
        "router_decisions": router_n,
        "router_set_differs_fraction": router_diff_set / router_n if router_n else None,
        "router_order_differs_fraction": router_diff_order / router_n if router_n else None,
    }
    ra, rb = a.get("layer_rms"), b.get("layer_rms")
    if ra and rb and len(ra) == len(rb):
        out["max_rel_delta_layer_rms"] = max(abs(x - y) / max(abs(x), 1e-30) for x, y in zip(ra, rb))
    if a.get("model_dir_config_sha256") != b.get("model_dir_config_sha256"):
        out["warning"] = "the two goldens come from different config.json files"
    return out


def pairs(args):
    """(label, path A, path B) to compare, from the command-line paths."""
    if len(args) == 1:
        d = args[0]
        return [("fp32 vs bf16", os.path.join(d, "golden-fp32.json"), os.path.join(d, "golden-bf16.json"))]
    a, b = args
    if os.path.isdir(a) and os.path.isdir(b):
        out = []
        for p in ("fp32", "bf16", "fp64"):
            fa, fb = os.path.join(a, "golden-%s.json" % p), os.path.join(b, "golden-%s.json" % p)
            if os.path.exists(fa) and os.path.exists(fb):
                out.append((p, fa, fb))
        if not out:
            raise SystemExit("no golden-<precision>.json present in both %s and %s" % (a, b))
        return out
    return [("%s vs %s" % (a, b), a, b)]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("paths", nargs="+", help="DIR, or A B")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args(argv)
    if len(args.paths) > 2:
        ap.error("give one directory or two paths")
    results = {}
    for label, fa, fb in pairs(args.paths):
        r = compare_docs(load(fa), load(fb))
        results[label] = r
        print("%s  (%s vs %s)" % (label, fa, fb))
        for k, v in r.items():
            print("  %-32s %s" % (k, "%.6g" % v if isinstance(v, float) else v))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
