#!/usr/bin/env python3
"""Module checks of k3_ref against independent implementations, written as JSON.

    module_checks.py OUT_JSON [--device cpu|cuda] [--k3-dir MODEL_DIR] [--skip-transformers]

1. KDA delta rule: transformers' Kimi Linear torch fallbacks (transformers.models.kimi_linear.modeling_kimi_linear:
   torch_recurrent_kda / torch_chunk_kda, or whatever callables with "kda" in their name it has) against our
   kda_recurrent and kda_chunked, on the same random q, k, v, g, beta; T = 1, 63, 64, 65, 129; heads 1 and 4;
   head dim 128. transformers scales q by head_dim^-0.5 itself, so it gets the unscaled (L2-normed) q.
2. Causal softmax attention (MLA core): transformers' eager_attention_forward and, on torch >= 2,
   torch.nn.functional.scaled_dot_product_attention, against ours.
3. MXFP4 decoding and SiTU against straightforward NumPy; the public golden row (spec section 4) from the
   codes/scale that produce it, and from the real shard when --k3-dir points at the official checkpoint.
Every check records max abs and rel error, its tolerance and pass/fail. Missing transformers pieces are
reported (with the module's available attribute names), not fatal. Exit status 1 if any check failed.
"""

import argparse
import inspect
import json
import os
import platform
import sys
import traceback

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import checkpoint  # noqa: E402
import k3_ref  # noqa: E402

KDA_SHAPES = [(T, nh) for T in (1, 63, 64, 65, 129) for nh in (1, 4)]
HEAD_DIM = 128


def errors(got, want):
    got = got.detach().double().cpu()
    want = want.detach().double().cpu()
    diff = (got - want).abs()
    return float(diff.max()), float((diff / want.abs().clamp_min(1e-6)).max()), float(want.abs().max())


def record(checks, name, got, want, tol, **extra):
    if tuple(got.shape) != tuple(want.shape):
        note = "shape %s vs %s" % (list(got.shape), list(want.shape))
        checks.append(dict(name=name, passed=False, note=note, **extra))
        return
    max_abs, max_rel, scale = errors(got, want)
    ok = max_abs <= tol * max(1.0, scale) and bool(torch.isfinite(got).all())
    checks.append(dict(name=name, max_abs=max_abs, max_rel=max_rel, ref_max=scale, tol=tol, passed=ok, **extra))


def kda_inputs(T, nh, d, seed, device):
    g = torch.Generator().manual_seed(seed)
    q = k3_ref.l2_normalize(torch.randn(T, nh, d, generator=g))
    k = k3_ref.l2_normalize(torch.randn(T, nh, d, generator=g))
    v = torch.randn(T, nh, d, generator=g)
    gate = k3_ref.kda_gate(torch.randn(T, nh, d, generator=g) * 2, torch.rand(nh, generator=g) * 2,
                           torch.randn(nh, d, generator=g) * 0.5, -5.0)
    beta = torch.sigmoid(torch.randn(T, nh, generator=g))
    return [x.to(device) for x in (q, k, v, gate, beta)]


# ----------------------------------------------------------------------------------------------------------
# transformers


def find_transformers(report):
    try:
        import transformers
    except Exception as e:  # noqa: BLE001
        report["transformers"] = {"error": "transformers not importable: %r" % e}
        return None
    info = {"version": transformers.__version__}
    report["transformers"] = info
    mod = None
    for name in ("transformers.models.kimi_linear.modeling_kimi_linear", "transformers.models.kimi_linear"):
        try:
            mod = __import__(name, fromlist=["*"])
            info["module"] = name
            break
        except Exception as e:  # noqa: BLE001
            info.setdefault("import_errors", []).append("%s: %r" % (name, e))
    if mod is None:
        print("module_checks: transformers %s has no importable kimi_linear module" % transformers.__version__,
              file=sys.stderr)
        return None
    attrs = sorted(a for a in dir(mod) if not a.startswith("__"))
    info["available_attrs"] = attrs
    kda = {}
    for want in ("torch_recurrent_kda", "torch_chunk_kda",  # names in earlier transformers sources
                 "recurrent_kimi_delta_attention", "chunk_kimi_delta_attention"):  # transformers 5.17
        if callable(getattr(mod, want, None)):
            kda[want] = getattr(mod, want)
    for a in attrs:  # other spellings: anything callable with "kda" in its name that is a function
        if "kda" in a.lower() and a not in kda and inspect.isfunction(getattr(mod, a)):
            kda[a] = getattr(mod, a)
    info["kda_functions"] = sorted(kda)
    if not kda:
        info["missing"] = "no KDA function found (looked for torch_recurrent_kda, torch_chunk_kda, *kda*)"
        print("module_checks: %s: no KDA function; attributes: %s" % (info["module"], ", ".join(attrs)),
              file=sys.stderr)
    eager = getattr(mod, "eager_attention_forward", None)
    info["eager_attention_forward"] = callable(eager)
    return {"kda": kda, "eager": eager}


def safe_signature(fn):
    try:
        return str(inspect.signature(fn))
    except (TypeError, ValueError):
        return "?"


def call_transformers_kda(fn, q, k, v, g, beta):
    """Calls fn with [B=1, T, H, D] tensors (the layout of the transformers code read when writing this);
    returns the output as [T, H, D]. q is unscaled: transformers scales by D^-0.5 itself."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        params = {}
    kwargs = {}
    if "initial_state" in params:  # positional without a default in recurrent_kimi_delta_attention
        kwargs["initial_state"] = None
    if "output_final_state" in params:
        kwargs["output_final_state"] = False
    if "use_qk_l2norm_in_kernel" in params:
        kwargs["use_qk_l2norm_in_kernel"] = False
    out = fn(q[None], k[None], v[None], g[None], beta[None], **kwargs)
    if isinstance(out, (tuple, list)):
        out = out[0]
    return out[0]


def check_transformers_kda(checks, found, device):
    for fname, fn in sorted(found["kda"].items()):
        for T, nh in KDA_SHAPES:
            q, k, v, g, beta = kda_inputs(T, nh, HEAD_DIM, seed=1000 + T * 8 + nh, device=device)
            name = "kda transformers.%s vs ours" % fname
            try:
                theirs = call_transformers_kda(fn, q, k, v, g, beta)
            except Exception as e:  # noqa: BLE001
                checks.append(dict(name=name, T=T, heads=nh, passed=False,
                                   note="call failed: %r; signature %s" % (e, safe_signature(fn)),
                                   trace=traceback.format_exc(limit=3)))
                continue
            qs = q * HEAD_DIM ** -0.5
            ours_step, _ = k3_ref.kda_recurrent(qs, k, v, g, beta)
            ours_chunk, _ = k3_ref.kda_chunked(qs, k, v, g, beta)
            record(checks, name + " (step)", theirs, ours_step, 1e-4, T=T, heads=nh)
            record(checks, name + " (chunked)", theirs, ours_chunk, 1e-4, T=T, heads=nh)


def check_attention(checks, found, device):
    g = torch.Generator().manual_seed(7)
    for T, nh in ((1, 1), (65, 4), (129, 4)):
        q = torch.randn(T, nh, 192, generator=g).to(device)
        k = torch.randn(T, nh, 192, generator=g).to(device)
        v = torch.randn(T, nh, 128, generator=g).to(device)
        scale = 192 ** -0.5
        ours = k3_ref.causal_softmax_attention(q, k, v, scale)
        rows = k3_ref.causal_softmax_attention_rows(q, k, v, scale)
        record(checks, "mla attention: masked vs row-by-row (ours)", ours, rows, 1e-5, T=T, heads=nh)
        qb, kb, vb = (x.transpose(0, 1)[None] for x in (q, k, v))  # [1, H, T, D]
        if hasattr(torch.nn.functional, "scaled_dot_product_attention"):
            try:  # a builtin: inspect.signature cannot read it, so try the keyword (torch >= 2.1)
                sdpa = torch.nn.functional.scaled_dot_product_attention(qb, kb, vb, is_causal=True, scale=scale)
            except TypeError:
                sdpa = torch.nn.functional.scaled_dot_product_attention(qb * (scale * 192 ** 0.5), kb, vb, is_causal=True)
            record(checks, "mla attention: torch sdpa vs ours", sdpa[0].transpose(0, 1), ours, 1e-5, T=T, heads=nh)
        eager = found.get("eager") if found else None
        if eager is not None:
            class _M:  # the attributes eager_attention_forward reads
                num_key_value_groups = 1
                training = False
            mask = torch.full((T, T), float("-inf"), device=device).triu(1)[None, None]
            try:
                out = eager(_M(), qb, kb, vb, mask, scaling=scale, dropout=0.0)
                out = out[0] if isinstance(out, (tuple, list)) else out
                record(checks, "mla attention: transformers eager_attention_forward vs ours", out[0], ours, 1e-5,
                       T=T, heads=nh)
            except Exception as e:  # noqa: BLE001
                checks.append(dict(name="mla attention: transformers eager_attention_forward", passed=False,
                                   note="call failed: %r" % e))


# ----------------------------------------------------------------------------------------------------------
# NumPy checks


def check_numpy(checks, device, k3_dir):
    rng = np.random.default_rng(0)
    # MXFP4
    lut = np.array([0, .5, 1, 1.5, 2, 3, 4, 6, -0., -.5, -1, -1.5, -2, -3, -4, -6])
    codes = rng.integers(0, 16, size=(64, 256))
    scales = rng.integers(100, 150, size=(64, 8))
    want = (lut[codes] * np.exp2(np.repeat(scales, 32, axis=1) - 127.0)).astype(np.float32)
    packed = torch.tensor(codes[:, 0::2] | (codes[:, 1::2] << 4), dtype=torch.uint8, device=device)
    got = checkpoint.decode_mxfp4(packed, torch.tensor(scales, dtype=torch.uint8, device=device))
    record(checks, "mxfp4 decode vs numpy", got, torch.from_numpy(want), 0.0)
    golden = checkpoint.GOLDEN_ROW
    row_codes = checkpoint.GOLDEN_ROW_CODES + [0] * 16
    packed = torch.tensor([[row_codes[2 * j] | (row_codes[2 * j + 1] << 4) for j in range(16)]], dtype=torch.uint8)
    scale = torch.tensor([[checkpoint.GOLDEN_ROW_SCALE]], dtype=torch.uint8)
    got = checkpoint.decode_mxfp4(packed, scale)[0, :16]
    record(checks, "mxfp4 public golden row (synthetic codes, scale 121)", got, torch.tensor(golden), 0.0)
    if k3_dir:
        try:
            ck = checkpoint.Checkpoint(k3_dir)
            p = checkpoint.PREFIX + "layers.1.block_sparse_moe.experts.0.w1."
            row = checkpoint.decode_mxfp4(ck.get(p + "weight_packed")[:1], ck.get(p + "weight_scale")[:1], p)[0, :16]
            record(checks, "mxfp4 public golden row (real shard)", row, torch.tensor(golden), 0.0)
        except Exception as e:  # noqa: BLE001
            checks.append(dict(name="mxfp4 public golden row (real shard)", passed=False, note=repr(e)))
    # SiTU
    a = rng.normal(size=4096) * 8
    b = rng.normal(size=4096) * 40
    sig = 1 / (1 + np.exp(-a))
    want = 4 * np.tanh(a / 4) * sig * 25 * np.tanh(b / 25)
    got = k3_ref.situ(torch.tensor(a, dtype=torch.float32, device=device),
                      torch.tensor(b, dtype=torch.float32, device=device), 4.0, 25.0)
    record(checks, "situ fp32 vs numpy fp64", got, torch.from_numpy(want), 1e-6)
    # KDA step vs chunked (ours), K3 head dim
    for T, nh in KDA_SHAPES:
        q, k, v, g, beta = kda_inputs(T, nh, HEAD_DIM, seed=T * 8 + nh, device=device)
        q = q * HEAD_DIM ** -0.5
        step, s1 = k3_ref.kda_recurrent(q, k, v, g, beta)
        chunk, s2 = k3_ref.kda_chunked(q, k, v, g, beta)
        record(checks, "kda ours: chunked vs step (fp32)", chunk, step, 1e-5, T=T, heads=nh)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out_json")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--k3-dir", help="the official checkpoint, for the real-shard MXFP4 row")
    ap.add_argument("--skip-transformers", action="store_true")
    args = ap.parse_args(argv)
    k3_ref.deterministic_matmuls()
    report = {
        "versions": {"python": platform.python_version(), "torch": torch.__version__, "numpy": np.__version__},
        "device": args.device + (" (%s)" % torch.cuda.get_device_name(0) if args.device.startswith("cuda") else ""),
    }
    checks = []
    check_numpy(checks, args.device, args.k3_dir)
    found = None if args.skip_transformers else find_transformers(report)
    if found:
        check_transformers_kda(checks, found, args.device)
    check_attention(checks, found, args.device)
    report["checks"] = checks
    report["all_passed"] = all(c["passed"] for c in checks)
    report["transformers_kda_checked"] = bool(found and found["kda"])
    with open(args.out_json, "w") as f:
        json.dump(report, f, indent=1)
        f.write("\n")
    for c in checks:
        extra = " T=%s heads=%s" % (c["T"], c["heads"]) if "T" in c else ""
        print("%-4s %s%s  max_abs=%s %s" % ("ok" if c["passed"] else "FAIL", c["name"], extra,
                                          "%.3g" % c["max_abs"] if "max_abs" in c else "-", c.get("note", "")))
    print("all passed: %s; transformers KDA checked: %s" % (report["all_passed"], report["transformers_kda_checked"]))
    return 0 if report["all_passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
