#!/usr/bin/env python3
"""Writes a trained state (train.py's state.pt) as a checkpoint in the official format.

    export.py TEMPLATE_DIR STATE_PT OUT_DIR

The layout is the template's (a `potato synth` directory of the same shape): the same shards, tensor
names, dtypes, shapes and index, config.json and tokenizer files copied byte for byte, so the result is
exactly what the engine reads for the official release. Values come from the state: BF16 tensors rounded
to bf16, F32 ones as they are (A_log padded with zeros to the template's length; the first num_heads are
the model's), the correction biases, and routed experts encoded as MXFP4 (mxfp4.encode, the same values
the quantisation-aware steps trained through). Tensors the text model does not have (the small vision
tower of the template) are copied unchanged. Every template tensor must be accounted for, and every
state tensor used: the error lists what is not.

A development tool that makes the demo model; it never reads or writes Kimi K3's weights.
"""

import argparse
import json
import os
import re
import shutil
import struct
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import safetensors_io  # noqa: E402
import model  # noqa: E402
import mxfp4  # noqa: E402

EXPERT = re.compile(r"^(.*layers\.(\d+)\.block_sparse_moe)\.experts\.(\d+)\.(w[123])\.(weight_packed|weight_scale)$")
TORCH = {"BF16": torch.bfloat16, "F32": torch.float32, "U8": torch.uint8}


def metadata(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        return json.loads(f.read(n).decode("utf-8")).get("__metadata__")


def tensor_for(name, dtype, shape, values, used, template_shard):
    """The value of template tensor name (dtype, shape) from the trained values."""
    m = EXPERT.match(name)
    if m:
        key = model.experts_key(int(m.group(2)), m.group(4))
        used.add(key)
        packed, scale = mxfp4.encode(values[key][int(m.group(3))])
        t = packed if m.group(5) == "weight_packed" else scale
    elif name in values:
        used.add(name)
        t = values[name].detach().float()
        if name.endswith("A_log") and t.numel() < shape[0]:
            t = torch.cat([t, t.new_zeros(shape[0] - t.numel())])
        t = t.to(TORCH[dtype])
    elif name.startswith(("vision_tower.", "mm_projector.")):
        return template_shard.get(name)
    else:
        raise KeyError(name)
    if list(t.shape) != list(shape) or t.dtype != TORCH[dtype]:
        raise ValueError("tensor %s: want %s %s, got %s %s" % (name, shape, dtype, list(t.shape), t.dtype))
    return t.contiguous()


def export(template_dir, state_path, out_dir):
    state = torch.load(state_path)
    values = dict(state["params"])
    values.update(state["buffers"])
    with open(os.path.join(template_dir, "model.safetensors.index.json")) as f:
        index = json.load(f)
    os.makedirs(out_dir, exist_ok=True)
    used, missing = set(), []
    for shard in sorted(set(index["weight_map"].values())):
        path = os.path.join(template_dir, shard)
        header, _ = safetensors_io.read_header(path)
        src = safetensors_io.open_shard(path, prefer_package=False)
        tensors = {}
        for name, e in header.items():
            try:
                tensors[name] = tensor_for(name, e["dtype"], e["shape"], values, used, src)
            except KeyError:
                missing.append(name)
        safetensors_io.write_shard(os.path.join(out_dir, shard), tensors, metadata(path))
    unused = sorted(set(values) - used)
    if missing or unused:
        raise SystemExit("export: template tensors without a trained value: %s; trained tensors not written: %s"
                         % (missing[:10], unused[:10]))
    for f in os.listdir(template_dir):
        if not f.endswith(".safetensors"):
            shutil.copyfile(os.path.join(template_dir, f), os.path.join(out_dir, f))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("template_dir")
    ap.add_argument("state")
    ap.add_argument("out_dir")
    args = ap.parse_args(argv)
    export(args.template_dir, args.state, args.out_dir)


if __name__ == "__main__":
    main()
