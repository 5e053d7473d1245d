#!/usr/bin/env python3
"""Writes a tiny random K3 checkpoint in the official format, for testing k3_ref without real weights.

    make_tiny_fixture.py OUT_DIR [--seed 0] [--shards 3] [--set key=value ...]

Default shape: hidden 64; 6 layers, MLA at 1-indexed [4, 5, 6] (0-indexed 3, 4, 5), KDA elsewhere; 4 KDA heads
of 16; 4 MLA heads (nope 16, shared slot 8, v 16, q rank 32, kv rank 16); layer 0 dense (intermediate 128),
layers 1..5 LatentMoE with 8 experts, 2 active, latent 32, expert width 32, 2 shared experts; AttnRes block
size 2; vocabulary 512 (256 byte-level slots + 256 specials). `--set` overrides a text_config field
(JSON value), e.g. --set num_hidden_layers=8 --set 'linear_attn_config.full_attn_layers=[4,8]'.

Files: config.json (top-level model_type kimi_k3 with a text_config), model.safetensors.index.json,
model-0000N-of-0000M.safetensors. Routed experts are MXFP4 (U8 weight_packed / weight_scale); conv weights,
A_log (padded to head_dim), dt_bias, o_norm and the router bias are F32; everything else BF16. Two small
vision_tower / mm_projector tensors are added so that readers exercise their skip path.
"""

import argparse
import json
import math
import os
import sys

import torch

import checkpoint as ckpt_mod
import safetensors_io


def tiny_text_config():
    n_layers = 6
    full = [4, 5, 6]
    return {
        "model_type": "kimi_linear",
        "hidden_size": 64,
        "num_hidden_layers": n_layers,
        "vocab_size": 512,
        "rms_norm_eps": 1e-5,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "q_lora_rank": 32,
        "kv_lora_rank": 16,
        "qk_nope_head_dim": 16,
        "qk_rope_head_dim": 8,
        "v_head_dim": 16,
        "mla_use_nope": True,
        "mla_use_output_gate": True,
        "linear_attn_config": {
            "head_dim": 16,
            "num_heads": 4,
            "short_conv_kernel_size": 4,
            "use_full_rank_gate": True,
            "gate_lower_bound": -5.0,
            "kda_layers": [i for i in range(1, n_layers + 1) if i not in full],
            "full_attn_layers": full,
        },
        "intermediate_size": 128,
        "first_k_dense_replace": 1,
        "moe_layer_freq": 1,
        "num_experts": 8,
        "num_experts_per_token": 2,
        "num_shared_experts": 2,
        "moe_intermediate_size": 32,
        "routed_expert_hidden_size": 32,
        "latent_moe_use_norm": True,
        "moe_router_activation_func": "sigmoid",
        "moe_renormalize": True,
        "routed_scaling_factor": 1.0,
        "topk_method": "noaux_tc",
        "num_expert_group": 1,
        "topk_group": 1,
        "hidden_act": "situ",
        "activation_situ_beta": 4.0,
        "activation_situ_linear_beta": 25.0,
        "attn_res_block_size": 2,
        "tie_word_embeddings": False,
        "num_nextn_predict_layers": 0,
        "rope_theta": 50000.0,
        "bos_token_id": 256,
        "eos_token_id": 258,
        "pad_token_id": 511,
    }


def top_config(text_config):
    return {
        "architectures": ["KimiK3ForConditionalGeneration"],
        "model_type": "kimi_k3",
        "text_config": text_config,
        "quantization_config": {
            "quant_method": "compressed-tensors",
            "format": "mxfp4-pack-quantized",
            "config_groups": {"group_0": {"weights": {"num_bits": 4, "type": "float", "group_size": 32}}},
        },
    }


def random_mxfp4(rows, cols, gen):
    """Random E2M1 codes with per-group scales chosen so that values have a std of about 1/sqrt(cols)."""
    codes = torch.randint(0, 16, (rows, cols), generator=gen, dtype=torch.int64)
    packed = (codes[:, 0::2] | (codes[:, 1::2] << 4)).to(torch.uint8)
    base = 127 + round(math.log2(1.0 / (2.6 * math.sqrt(cols))))
    jitter = torch.randint(-1, 2, (rows, cols // 32), generator=gen, dtype=torch.int64)
    scale = (base + jitter).to(torch.uint8)
    return packed, scale


def random_tensor(name, dtype, shape, cfg, gen):
    """A plausible random value for one tensor, by its role (name)."""
    if dtype == "U8":
        raise AssertionError("experts are drawn in pairs by random_mxfp4")
    leaf = name.rsplit(".", 2)
    normal = lambda std: torch.randn(shape, generator=gen, dtype=torch.float64) * std
    if name.endswith("A_log"):
        t = torch.log(1.0 + 15.0 * torch.rand(shape, generator=gen, dtype=torch.float64))
    elif name.endswith("dt_bias"):
        t = normal(0.5)
    elif "conv1d" in name:
        t = normal(0.5)
    elif name.endswith("e_score_correction_bias"):
        t = normal(0.02)
    elif "norm" in leaf[-2] or name.endswith("o_norm.weight"):
        t = 1.0 + normal(0.1)  # RMSNorm gains
    elif name.endswith("_res_proj.weight"):
        t = normal(1.0 / math.sqrt(shape[-1]))
    elif name.endswith("embed_tokens.weight"):
        t = normal(1.0)
    elif len(shape) == 2:
        gain = 0.5 if any(k in name for k in ("o_proj", "down_proj", "routed_expert_up_proj")) else 1.0
        if name == ckpt_mod.LM_HEAD:
            gain = 3.0  # peaked next-token distributions, so that top-1 comparisons mean something
        t = normal(gain / math.sqrt(shape[1]))
    else:
        t = normal(1.0)
    return t.to(torch.float32 if dtype == "F32" else torch.bfloat16)


def shard_of(name, cfg, n_shards):
    """1-based shard number: layers spread evenly; embeddings first, head and final norms last."""
    if ".layers." in name:
        i = int(name.split(".layers.")[1].split(".")[0])
        return 1 + (i * n_shards) // cfg.num_layers
    if "embed_tokens" in name or name.startswith(ckpt_mod.SKIPPED_PREFIXES):
        return 1
    return n_shards


def write_checkpoint(out_dir, text_config=None, seed=0, n_shards=3):
    text_config = text_config or tiny_text_config()
    top = top_config(text_config)
    cfg = ckpt_mod.Config(top)
    gen = torch.Generator().manual_seed(seed)
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(top, f, indent=2)
        f.write("\n")
    shards = {s: {} for s in range(1, n_shards + 1)}
    specs = ckpt_mod.all_specs(cfg)
    for name, dtype, shape in specs:
        if name.endswith(".weight_scale"):
            continue
        if name.endswith(".weight_packed"):
            rows, half = shape
            packed, scale = random_mxfp4(rows, 2 * half, gen)
            s = shard_of(name, cfg, n_shards)
            shards[s][name] = packed
            shards[s][name[:-len("weight_packed")] + "weight_scale"] = scale
            continue
        shards[shard_of(name, cfg, n_shards)][name] = random_tensor(name, dtype, shape, cfg, gen)
    # the image path, which K3 text readers skip
    shards[1]["vision_tower.patch_embed.weight"] = torch.zeros(4, 4, dtype=torch.bfloat16)
    shards[1]["mm_projector.linear_1.weight"] = torch.zeros(4, 4, dtype=torch.bfloat16)
    weight_map, total = {}, 0
    for s, tensors in shards.items():
        file = "model-%05d-of-%05d.safetensors" % (s, n_shards)
        total += safetensors_io.write_shard(os.path.join(out_dir, file), tensors)
        for name in tensors:
            weight_map[name] = file
    with open(os.path.join(out_dir, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}, f, indent=1)
        f.write("\n")
    return cfg


def parse_sets(sets):
    tc = tiny_text_config()
    for item in sets:
        key, _, value = item.partition("=")
        node = tc
        parts = key.split(".")
        for p in parts[:-1]:
            node = node[p]
        node[parts[-1]] = json.loads(value)
    return tc


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out_dir")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--shards", type=int, default=3)
    ap.add_argument("--set", action="append", default=[], help="text_config override key=JSON")
    args = ap.parse_args(argv)
    cfg = write_checkpoint(args.out_dir, parse_sets(args.set), args.seed, args.shards)
    print("wrote %s: %d layers (%s)" % (args.out_dir, cfg.num_layers,
                                         ", ".join(cfg.kind(i) for i in range(cfg.num_layers))), file=sys.stderr)


if __name__ == "__main__":
    main()
