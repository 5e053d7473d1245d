#!/usr/bin/env python3
"""Trains the demo model: a small K3 (the shape of a template checkpoint's config.json) on token ids.

    train.py TEMPLATE_DIR CORPUS_DIR OUT_DIR [--steps N] [--qat-steps N] [--seed S] ...

TEMPLATE_DIR is a checkpoint in the official format whose config.json gives the shape (the demo model
uses `potato synth --preset tiny`); CORPUS_DIR holds train.u16 and heldout.u16 from
replay/demomodel/internal/corpus. OUT_DIR gets state.pt (fp32 parameters and correction biases),
log.jsonl (one line per logged step) and summary.json. The last --qat-steps steps train through the
quantisation export.py applies (bf16 weights, MXFP4 routed experts; straight-through gradients).
Routing is balanced as K3 does it, without an auxiliary loss: after every step each MoE layer's
correction bias moves by --bias-rate towards uniform expert load (model.update_bias).

A development tool that makes the demo model; it never reads or writes Kimi K3's weights.
"""

import argparse
import json
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import checkpoint as ckpt_mod  # noqa: E402
import k3_ref  # noqa: E402
import model  # noqa: E402


def load_ids(path):
    return torch.from_numpy(np.fromfile(path, dtype="<u2").astype(np.int64))


def batches(ids, batch, seq, gen, device):
    """Random windows of seq+1 tokens from ids: (inputs [batch, seq], targets [batch, seq])."""
    starts = torch.randint(0, len(ids) - seq - 1, (batch,), generator=gen)
    w = torch.stack([ids[s:s + seq + 1] for s in starts.tolist()]).to(device)
    return w[:, :-1], w[:, 1:]


def evaluate(cfg, W, ids, seq, max_tokens, device, lens=False):
    """Mean next-token loss (nats) over consecutive windows of ids, at most max_tokens targets; with lens
    also the logit-lens entropy (nats, full vocabulary) of every layer averaged over the positions."""
    n = min(len(ids) - 1, max_tokens) // seq
    total, count = 0.0, 0
    lens_sum = None
    with torch.no_grad():
        for b in range(0, n, 16):
            rows = range(b, min(n, b + 16))
            x = torch.stack([ids[r * seq:(r + 1) * seq] for r in rows]).to(device)
            y = torch.stack([ids[r * seq + 1:(r + 1) * seq + 1] for r in rows]).to(device)
            logits, _, lens_logits = model.forward(cfg, W, x, lens=lens)
            total += F.cross_entropy(logits.reshape(-1, cfg.vocab), y.reshape(-1), reduction="sum").item()
            count += y.numel()
            if lens:
                ent = [float(-(F.softmax(l, -1) * F.log_softmax(l, -1)).sum(-1).sum()) for l in lens_logits]
                lens_sum = ent if lens_sum is None else [a + e for a, e in zip(lens_sum, ent)]
    if lens:
        return total / count, [e / count for e in lens_sum]
    return total / count


def unigram_entropy(ids, vocab):
    """Entropy (nats) of the empirical unigram distribution of ids."""
    c = torch.bincount(ids, minlength=vocab).double()
    p = c[c > 0] / c.sum()
    return float(-(p * p.log()).sum())


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("template_dir")
    ap.add_argument("corpus_dir")
    ap.add_argument("out_dir")
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--qat-steps", type=int, default=150)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--bias-rate", type=float, default=2e-3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (on a shared 2-core machine 1 was 7x faster than 2)")
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--eval-tokens", type=int, default=20000)
    ap.add_argument("--max-minutes", type=float, default=0,
                    help="end the main phase (then QAT) after this long; the schedule follows time or steps, whichever is further")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--final-eval-tokens", type=int, default=0, help="held-out tokens of the final evaluation (0: all)")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    os.makedirs(args.out_dir, exist_ok=True)
    cfg, _ = ckpt_mod.load_config(args.template_dir)
    train = load_ids(os.path.join(args.corpus_dir, "train.u16"))
    held = load_ids(os.path.join(args.corpus_dir, "heldout.u16"))
    gen = torch.Generator().manual_seed(args.seed)
    P, Bf = model.init_params(cfg, gen)
    dev = torch.device(args.device)
    if dev.type == "cuda":
        model.KDA_CHUNK = 64
        k3_ref.deterministic_matmuls()  # fp32 means fp32 (no TF32)
    P = {n: t.to(dev) for n, t in P.items()}
    Bf = {n: t.to(dev) for n, t in Bf.items()}
    for t in P.values():
        t.requires_grad_(True)
    decay = [t for n, t in P.items() if t.dim() >= 2 and "conv1d" not in n]
    no_decay = [t for n, t in P.items() if not (t.dim() >= 2 and "conv1d" not in n)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95))
    log = open(os.path.join(args.out_dir, "log.jsonl"), "w")
    t0 = time.time()
    total = args.steps + args.qat_steps
    step, main_end = 0, args.steps
    while step < total:
        qat = step >= main_end
        if not qat and args.max_minutes and time.time() - t0 > args.max_minutes * 60:
            main_end = step  # out of time: go to the QAT phase now
            total = step + args.qat_steps
            continue
        progress = step / args.steps
        if args.max_minutes:
            progress = max(progress, (time.time() - t0) / (args.max_minutes * 60))
        if step < args.warmup:
            lr = args.lr * (step + 1) / args.warmup
        elif not qat:
            lr = args.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, progress))))
        else:
            lr = args.lr * 0.05
        for g in opt.param_groups:
            g["lr"] = lr
        W = model.Weights(P, Bf, qat=qat)
        x, y = batches(train, args.batch, args.seq, gen, dev)
        logits, loads, _ = model.forward(cfg, W, x)
        loss = F.cross_entropy(logits.reshape(-1, cfg.vocab), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        gnorm = torch.nn.utils.clip_grad_norm_(list(P.values()), 1.0)
        opt.step()
        with torch.no_grad():
            model.update_bias(cfg, Bf, loads, args.bias_rate)
        rec = {"step": step, "loss": loss.item(), "lr": lr, "qat": qat, "grad_norm": float(gnorm),
               "seconds": round(time.time() - t0, 1),
               "max_load": max(float(l.max()) for l in loads), "min_load": min(float(l.min()) for l in loads)}
        if step % args.eval_every == 0 or step == total - 1:
            rec["heldout_loss"] = evaluate(cfg, model.Weights(P, Bf, qat=qat), held, args.seq, args.eval_tokens, dev)
        log.write(json.dumps(rec) + "\n")
        log.flush()
        if step % 10 == 0 or "heldout_loss" in rec:
            print(json.dumps(rec), flush=True)
        step += 1
    state = {"params": {n: t.detach().cpu() for n, t in P.items()}, "buffers": {n: t.cpu() for n, t in Bf.items()}}
    torch.save(state, os.path.join(args.out_dir, "state.pt"))
    fp32_loss = evaluate(cfg, model.Weights(P, Bf, qat=False), held, args.seq, args.final_eval_tokens or len(held), dev)
    q_loss, lens_entropy = evaluate(cfg, model.Weights(P, Bf, qat=True), held, args.seq, args.final_eval_tokens or len(held), dev, lens=True)
    summary = {
        "steps": step, "main_steps": main_end, "qat_steps": step - main_end, "seed": args.seed,
        "batch": args.batch, "seq": args.seq, "lr": args.lr, "bias_rate": args.bias_rate,
        "train_tokens_seen": step * args.batch * args.seq, "seconds": round(time.time() - t0, 1),
        "device": str(dev), "threads": args.threads, "heldout_tokens": len(held),
        "final_eval_tokens": args.final_eval_tokens or len(held),
        "heldout_loss_fp32": fp32_loss,
        "heldout_loss_quantised": q_loss,
        "lens_entropy_per_layer_quantised": lens_entropy,
        "heldout_unigram_entropy": unigram_entropy(held, cfg.vocab),
        "torch_version": torch.__version__,
    }
    with open(os.path.join(args.out_dir, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2)
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
