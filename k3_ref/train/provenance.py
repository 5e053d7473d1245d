#!/usr/bin/env python3
"""Writes the demo model's provenance record and figures from a training run.

    provenance.py CORPUS_DIR RUN_DIR ENGINE_EVAL_JSON OUT_DIR --digest HEX --trainer-commit HEX --command "..."

CORPUS_DIR has manifest.json (replay/demomodel/internal/corpus); RUN_DIR has train.py's log.jsonl and
summary.json; ENGINE_EVAL_JSON holds what the Go engine measured on the exported checkpoint
({"examples_mean_logprob": {...}, ...}). OUT_DIR gets PROVENANCE.md, loss.png and lens.png.
"""

import argparse
import json
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("corpus_dir")
    ap.add_argument("run_dir")
    ap.add_argument("engine_eval")
    ap.add_argument("out_dir")
    ap.add_argument("--digest", required=True)
    ap.add_argument("--trainer-commit", required=True)
    ap.add_argument("--command", required=True)
    args = ap.parse_args(argv)
    with open(os.path.join(args.corpus_dir, "manifest.json")) as f:
        man = json.load(f)
    with open(os.path.join(args.run_dir, "summary.json")) as f:
        summ = json.load(f)
    with open(args.engine_eval) as f:
        ev = json.load(f)
    log = [json.loads(l) for l in open(os.path.join(args.run_dir, "log.jsonl"))]

    # loss curve
    fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
    steps = [r["step"] for r in log]
    ax.plot(steps, [r["loss"] for r in log], lw=0.6, color="#9ab", label="training batch loss")
    held = [(r["step"], r["heldout_loss"]) for r in log if "heldout_loss" in r]
    ax.plot([s for s, _ in held], [v for _, v in held], "o-", color="#c40", ms=3, label="held-out loss (first %d tokens)" % 8192)
    ax.axhline(summ["heldout_unigram_entropy"], ls="--", color="#555", lw=0.8, label="held-out unigram entropy")
    ax.axhline(0.65 * summ["heldout_unigram_entropy"], ls=":", color="#555", lw=0.8, label="65% of it (the goal)")
    q0 = next((r["step"] for r in log if r["qat"]), None)
    if q0 is not None:
        ax.axvline(q0, color="#888", lw=0.6)
        ax.text(q0, ax.get_ylim()[1] * 0.97, " QAT", va="top", fontsize=8, color="#555")
    ax.set_xlabel("step (%d sequences x %d tokens)" % (summ["batch"], summ["seq"]))
    ax.set_ylabel("nats / token")
    ax.set_title("demo model training")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(args.out_dir, "loss.png"))

    # logit lens
    lens = summ["lens_entropy_per_layer_quantised"]
    fig, ax = plt.subplots(figsize=(6, 3.5), dpi=110)
    ax.plot(range(len(lens)), lens, "o-", color="#26a", label="held-out (k3_ref trainer, quantised weights)")
    if "examples_lens_entropy" in ev:
        e = ev["examples_lens_entropy"]
        ax.plot(range(len(e)), e, "s--", color="#c40", label="bundled examples (Go engine, bf16)")
    ax.set_xlabel("layer")
    ax.set_ylabel("mean entropy of the lens readout (nats)")
    ax.set_title("logit-lens entropy per layer, averaged over positions")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(args.out_dir, "lens.png"))

    ue = summ["heldout_unigram_entropy"]
    lines = []
    w = lines.append
    w("# The demo model: provenance")
    w("")
    w("A small model of the Kimi K3 architecture (the `tiny` preset's shape: 8 layers, hidden 128, KDA at")
    w("0-indexed layers 0, 1, 2, 4, 5 and MLA at 3, 6, 7, 16 routed experts with 4 active plus 1 shared,")
    w("AttnRes blocks of 3, the project's learned 3,328-token vocabulary), trained on real text and on")
    w("conversations in the K3 chat format. `model/` holds the checkpoint in the official format (written by")
    w("`k3_ref/train/export.py` into the layout `potato synth --preset tiny` writes); its synth.DirDigest is")
    w("`%s` (demomodel.Digest). It is a demonstration model: results on it say nothing about Kimi K3." % args.digest)
    w("")
    w("## Results")
    w("")
    w("| measure | value |")
    w("|---|---|")
    w("| held-out loss, fp32 weights (%d tokens) | %.4f nats/token |" % (summ.get("final_eval_tokens", 0), summ["heldout_loss_fp32"]))
    w("| held-out loss, as exported (bf16, MXFP4 experts) | %.4f nats/token |" % summ["heldout_loss_quantised"])
    w("| held-out unigram entropy (all %d held-out tokens) | %.4f nats/token |" % (summ["heldout_tokens"], ue))
    w("| exported held-out loss / unigram entropy | %.1f%% (goal: at most 65%%) |" % (100 * summ["heldout_loss_quantised"] / ue))
    for k, v in ev.get("examples_mean_logprob", {}).items():
        w("| mean logprob on datasets/examples/examples.jsonl, Go engine %s | %.3f nats (the synthetic tiny default: %s) |"
          % (k, v, ev.get("examples_mean_logprob_before", {}).get(k, "-10.7")))
    if "heldout_loss_engine_bf16" in ev:
        w("| held-out loss measured by the Go engine on the exported checkpoint (bf16, first %d tokens) | %.4f nats/token |"
          % (ev["heldout_engine_tokens"], ev["heldout_loss_engine_bf16"]))
    for k, v in ev.get("goldens", {}).items():
        w("| Go engine vs k3_ref goldens, %s | %s |" % (k, v))
    w("")
    w("The held-out losses are over the first %d tokens of the held-out split (consecutive windows of %d);"
      % (summ.get("final_eval_tokens", 0), summ["seq"]))
    w("the unigram entropy is that of the whole split. The synthetic default's mean logprob was measured with")
    w("the same tool (`replay/demomodel/internal/evaluate`); the issue quoted about -10.7.")
    w("")
    w("Logit-lens entropy per layer (nats, averaged over held-out positions, quantised weights): %s."
      % ", ".join("%d: %.2f" % (i, e) for i, e in enumerate(lens)))
    if "examples_lens_entropy" in ev:
        w("The same over the bundled examples, from the Go engine (bf16): %s."
          % ", ".join("%d: %.2f" % (i, e) for i, e in enumerate(ev["examples_lens_entropy"])))
    w("")
    w("![loss curve](loss.png) ![logit-lens entropy](lens.png)")
    w("")
    w("## Training")
    w("")
    w("- trainer: `k3_ref/train` (train.py, model.py, mxfp4.py, export.py) at commit `%s`; torch %s on %s"
      % (args.trainer_commit, summ["torch_version"], summ["device"]))
    w("- command: `%s`" % args.command)
    w("- seed %d; %d steps (%d main, then %d quantisation-aware: bf16 weights and MXFP4 routed experts in the"
      % (summ["seed"], summ["steps"], summ["main_steps"], summ["qat_steps"]))
    w("  forward, straight-through gradients); batches of %d random windows of %d tokens; AdamW, peak lr %g, cosine"
      % (summ["batch"], summ["seq"], summ["lr"]))
    w("  to a tenth over the run; %d training tokens seen; %.0f s of wall time." % (summ["train_tokens_seen"], summ["seconds"]))
    w("- routing balanced as K3 does it, without an auxiliary loss: after every step each MoE layer's")
    w("  e_score_correction_bias moves by %g towards uniform expert load (the sign of the deviation)." % summ["bias_rate"])
    last = log[-1]
    w("  Expert load at the last step: largest share %.3f, smallest %.3f (uniform: %.4f)."
      % (last["max_load"], last["min_load"], 1 / 16))
    w("")
    w("## Corpus")
    w("")
    w("Token ids from `go run ./replay/demomodel/internal/corpus` (the project's tokenizer and XTML encoder, so")
    w("the trainer saw exactly the engine's ids). %s." % man["tokenizer"])
    w("Split: %s." % man["split"])
    w("")
    w("| source | license | bytes | SHA-256 | train tokens | held-out tokens |")
    w("|---|---|---|---|---|---|")
    for s in man["sources"]:
        w("| %s%s | %s | %d | `%s` | %d | %d |" % (s["name"], " (x%d)" % s["repeat"] if s.get("repeat") else "",
                                                s["license"], s["bytes"], s["sha256"][:16], s["train_tokens"], s["heldout_tokens"]))
    w("")
    w("train.u16: %d tokens, SHA-256 `%s`; heldout.u16: %d tokens, SHA-256 `%s`."
      % (man["train_tokens"], man["train_sha256"], man["heldout_tokens"], man["heldout_sha256"]))
    w("")
    w("## Regenerating")
    w("")
    w("```sh")
    w("go run ./replay/demomodel/internal/corpus -goroot /usr/local/go -out k3_ref/train/work/corpus")
    w("go run ./cmd/potato synth --preset tiny --seed 1 --out k3_ref/train/work/tiny")
    w(args.command)
    w("/usr/bin/python3 k3_ref/train/export.py k3_ref/train/work/tiny k3_ref/train/work/run1/state.pt replay/demomodel/model")
    w("go test ./replay/demomodel -run TestDigest -v    # then set demomodel.Digest to the digest it prints")
    w("```")
    w("")
    w("Training is not bit-reproducible across machines (thread counts, BLAS); the committed checkpoint is the")
    w("record. The trainer is a development tool that makes this model; it never reads or writes K3's weights.")
    with open(os.path.join(args.out_dir, "PROVENANCE.md"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
