"""K3 checkpoint: config.json -> layer plan, the list of tensors that plan needs, validation, MXFP4 decoding.

Everything here follows K3_SPEC.md sections 1, 2 and 4. The tensor list (`layer_specs`, `global_specs`) is the
single statement of which tensors exist with which dtype and shape; the loader validates a model directory
against it and make_tiny_fixture.py writes exactly it.
"""

import json
import os

import torch

import safetensors_io

PREFIX = "language_model.model."
LM_HEAD = "language_model.lm_head.weight"
SKIPPED_PREFIXES = ("vision_tower.", "mm_projector.")  # the image path (spec section 2): never read


class CheckpointError(Exception):
    """A model directory that does not match the K3 contract; the message lists every problem found."""


# ----------------------------------------------------------------------------------------------------------
# config.json (spec section 1)


class Config:
    """The hyper-parameters the forward needs, read from config.json's text_config.

    Layer lists in the file are 1-indexed; everything here is 0-indexed."""

    def __init__(self, top):
        if top.get("model_type") != "kimi_k3":
            raise CheckpointError("config.json: top-level model_type is %r, want 'kimi_k3' (a plain Kimi Linear "
                                  "config is a different architecture: no AttnRes, no SiTU)" % top.get("model_type"))
        tc = top.get("text_config")
        if not isinstance(tc, dict):
            raise CheckpointError("config.json: no text_config object")
        self.raw = tc

        def need(key, src=tc, where="text_config"):
            if key not in src:
                raise CheckpointError("config.json: %s.%s is missing" % (where, key))
            return src[key]

        self.hidden = need("hidden_size")
        self.num_layers = need("num_hidden_layers")
        self.vocab = need("vocab_size")
        self.rms_eps = float(need("rms_norm_eps"))
        # MLA
        self.mla_heads = need("num_attention_heads")
        self.q_lora_rank = need("q_lora_rank")
        self.kv_lora_rank = need("kv_lora_rank")
        self.qk_nope = need("qk_nope_head_dim")
        self.qk_rope = need("qk_rope_head_dim")  # the shared key slot; K3 applies no rotary encoding (NoPE)
        self.v_head = need("v_head_dim")
        # KDA
        la = need("linear_attn_config")
        self.kda_heads = need("num_heads", la, "linear_attn_config")
        self.kda_head_dim = need("head_dim", la, "linear_attn_config")
        self.conv_kernel = need("short_conv_kernel_size", la, "linear_attn_config")
        self.gate_lower_bound = float(need("gate_lower_bound", la, "linear_attn_config"))
        full = [i - 1 for i in need("full_attn_layers", la, "linear_attn_config")]
        # FFNs
        self.dense_inter = need("intermediate_size")
        self.first_dense = need("first_k_dense_replace")
        if tc.get("moe_layer_freq", 1) != 1:
            raise CheckpointError("config.json: moe_layer_freq %r is not supported (K3 has 1)" % tc["moe_layer_freq"])
        self.num_experts = need("num_experts")
        self.top_k = need("num_experts_per_token")
        self.num_shared = need("num_shared_experts")
        self.moe_inter = need("moe_intermediate_size")
        self.latent = need("routed_expert_hidden_size")
        self.renormalize = bool(tc.get("moe_renormalize", True))
        self.routed_scale = float(tc.get("routed_scaling_factor", 1.0))
        if tc.get("moe_router_activation_func", "sigmoid") != "sigmoid":
            raise CheckpointError("config.json: router activation %r, want sigmoid" % tc["moe_router_activation_func"])
        if tc.get("num_expert_group", 1) != 1 or tc.get("topk_group", 1) != 1:
            raise CheckpointError("config.json: grouped routing is not supported (K3 has one group)")
        if not tc.get("latent_moe_use_norm", True):
            raise CheckpointError("config.json: latent_moe_use_norm false is not supported")
        if tc.get("hidden_act", "situ") != "situ":
            raise CheckpointError("config.json: hidden_act %r, want situ" % tc.get("hidden_act"))
        self.situ_beta = float(need("activation_situ_beta"))
        self.situ_linear_beta = float(need("activation_situ_linear_beta"))
        self.block_size = need("attn_res_block_size")
        if tc.get("tie_word_embeddings", False):
            raise CheckpointError("config.json: tied embeddings are not K3 (lm_head is separate)")

        self.mla_layers = sorted(full)
        bad = [i for i in self.mla_layers if not 0 <= i < self.num_layers]
        if bad:
            raise CheckpointError("config.json: full_attn_layers name layers outside 1..%d: %s"
                                  % (self.num_layers, [i + 1 for i in bad]))
        if "kda_layers" in la:
            kda = sorted(i - 1 for i in la["kda_layers"])
            want = [i for i in range(self.num_layers) if i not in set(full)]
            if kda != want:
                raise CheckpointError("config.json: kda_layers (1-indexed %s) is not the complement of "
                                      "full_attn_layers" % la["kda_layers"])

    # layer plan
    def is_mla(self, i):
        return i in self.mla_layers

    def is_moe(self, i):
        return i >= self.first_dense

    def moe_layers(self):
        return [i for i in range(self.num_layers) if self.is_moe(i)]

    def kind(self, i):
        return ("mla" if self.is_mla(i) else "kda") + ("+moe" if self.is_moe(i) else "+dense")


def load_config(model_dir):
    path = os.path.join(model_dir, "config.json")
    with open(path, "rb") as f:
        raw = f.read()
    return Config(json.loads(raw.decode("utf-8"))), raw


# ----------------------------------------------------------------------------------------------------------
# The tensor list (spec section 2): (name, dtype, shape), weights [out, in]


def global_specs(c):
    H, V = c.hidden, c.vocab
    return [
        (PREFIX + "embed_tokens.weight", "BF16", [V, H]),
        (PREFIX + "norm.weight", "BF16", [H]),
        (PREFIX + "output_attn_res_norm.weight", "BF16", [H]),
        (PREFIX + "output_attn_res_proj.weight", "BF16", [1, H]),
        (LM_HEAD, "BF16", [V, H]),
    ]


def layer_specs(c, i):
    H = c.hidden
    p = PREFIX + "layers.%d." % i
    out = [(p + n + ".weight", "BF16", [H]) for n in
           ("input_layernorm", "post_attention_layernorm", "self_attention_res_norm", "mlp_res_norm")]
    out += [(p + n + ".weight", "BF16", [1, H]) for n in ("self_attention_res_proj", "mlp_res_proj")]
    a = p + "self_attn."
    if c.is_mla(i):
        nh = c.mla_heads
        out += [
            (a + "q_a_proj.weight", "BF16", [c.q_lora_rank, H]),
            (a + "q_a_layernorm.weight", "BF16", [c.q_lora_rank]),
            (a + "q_b_proj.weight", "BF16", [nh * (c.qk_nope + c.qk_rope), c.q_lora_rank]),
            (a + "kv_a_proj_with_mqa.weight", "BF16", [c.kv_lora_rank + c.qk_rope, H]),
            (a + "kv_a_layernorm.weight", "BF16", [c.kv_lora_rank]),
            (a + "kv_b_proj.weight", "BF16", [nh * (c.qk_nope + c.v_head), c.kv_lora_rank]),
            (a + "g_proj.weight", "BF16", [nh * c.v_head, H]),
            (a + "o_proj.weight", "BF16", [H, nh * c.v_head]),
        ]
    else:
        nh, d = c.kda_heads, c.kda_head_dim
        C = nh * d
        out += [(a + n + ".weight", "BF16", [C, H]) for n in ("q_proj", "k_proj", "v_proj", "g_proj")]
        out += [(a + n + ".weight", "F32", [C, 1, c.conv_kernel]) for n in ("q_conv1d", "k_conv1d", "v_conv1d")]
        out += [
            (a + "f_a_proj.weight", "BF16", [d, H]),
            (a + "f_b_proj.weight", "BF16", [C, d]),
            (a + "b_proj.weight", "BF16", [nh, H]),
            (a + "A_log", "F32", [max(d, nh)]),  # padded to head_dim: the first nh entries are used
            (a + "dt_bias", "F32", [C]),
            (a + "o_norm.weight", "F32", [d]),
            (a + "o_proj.weight", "BF16", [H, C]),
        ]
    if c.is_moe(i):
        m = p + "block_sparse_moe."
        L, I, S = c.latent, c.moe_inter, c.num_shared * c.moe_inter
        out += [
            (m + "gate.weight", "BF16", [c.num_experts, H]),
            (m + "gate.e_score_correction_bias", "F32", [c.num_experts]),
            (m + "routed_expert_down_proj.weight", "BF16", [L, H]),
            (m + "routed_expert_norm.weight", "BF16", [L]),
            (m + "routed_expert_up_proj.weight", "BF16", [H, L]),
            (m + "shared_experts.gate_proj.weight", "BF16", [S, H]),
            (m + "shared_experts.up_proj.weight", "BF16", [S, H]),
            (m + "shared_experts.down_proj.weight", "BF16", [H, S]),
        ]
        for e in range(c.num_experts):
            out += expert_specs(c, i, e)
    else:
        f = p + "mlp."
        out += [
            (f + "gate_proj.weight", "BF16", [c.dense_inter, H]),
            (f + "up_proj.weight", "BF16", [c.dense_inter, H]),
            (f + "down_proj.weight", "BF16", [H, c.dense_inter]),
        ]
    return out


def expert_specs(c, i, e):
    """One routed expert: w1 (gate) and w3 (up) [moe_inter, latent], w2 (down) [latent, moe_inter], MXFP4."""
    p = PREFIX + "layers.%d.block_sparse_moe.experts.%d." % (i, e)
    out = []
    for w, rows, cols in (("w1", c.moe_inter, c.latent), ("w2", c.latent, c.moe_inter), ("w3", c.moe_inter, c.latent)):
        out.append((p + w + ".weight_packed", "U8", [rows, cols // 2]))
        out.append((p + w + ".weight_scale", "U8", [rows, cols // 32]))
    return out


def all_specs(c):
    out = global_specs(c)
    for i in range(c.num_layers):
        out += layer_specs(c, i)
    return out


# ----------------------------------------------------------------------------------------------------------
# MXFP4 (spec section 4)

# E2M1 code -> value; codes 8..15 are the negatives of 0..7 (8 is -0.0)
E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]

# The public golden of spec section 4: layer 1, expert 0, w1, row 0, first 16 columns of the real shard.
# In units of 2^-7 they are 8, 1, -1, -3, -8, -4, 3, 2, 6, -0, -3, -2, -3, -1, 2, -2; the only E8M0 scale that
# makes each an E2M1 value is 2^-6 (byte 121), and then the codes are GOLDEN_ROW_CODES.
GOLDEN_ROW = [0.0625, 0.0078125, -0.0078125, -0.0234375, -0.0625, -0.03125, 0.0234375, 0.015625, 0.046875, -0.0,
              -0.0234375, -0.015625, -0.0234375, -0.0078125, 0.015625, -0.015625]
GOLDEN_ROW_CODES = [6, 1, 9, 11, 14, 12, 3, 2, 5, 8, 11, 10, 11, 9, 2, 10]
GOLDEN_ROW_SCALE = 121


def decode_mxfp4(packed, scale, name="?"):
    """packed U8 [rows, n/2], scale U8 [rows, n/32] -> float32 [rows, n], exactly.

    Byte j of a row holds column 2j in its low nibble and column 2j+1 in its high nibble; the E8M0 scale byte
    s of group g multiplies columns 32g..32g+31 by 2^(s-127). s = 255 (NaN in the OCP spec) is refused."""
    rows, half = packed.shape
    n = 2 * half
    if tuple(scale.shape) != (rows, n // 32) or n % 32:
        raise CheckpointError("tensor %s: scale shape %s does not fit packed shape %s"
                              % (name, list(scale.shape), list(packed.shape)))
    if bool((scale == 255).any()):
        raise CheckpointError("tensor %s: E8M0 scale byte 255 (NaN) found" % name)
    packed = packed.to(torch.int64)
    low = packed & 0xF
    high = packed >> 4
    codes = torch.stack([low, high], dim=-1).reshape(rows, n)
    lut = torch.tensor(E2M1, dtype=torch.float64, device=packed.device)
    values = lut[codes].reshape(rows, n // 32, 32)
    factor = torch.pow(torch.tensor(2.0, dtype=torch.float64, device=packed.device),
                       scale.to(torch.float64) - 127.0)  # exact powers of two in float64
    out = (values * factor[:, :, None]).reshape(rows, n).to(torch.float32)
    if not bool(torch.isfinite(out).all()):
        raise CheckpointError("tensor %s: a decoded value exceeds the float32 range" % name)
    return out


# ----------------------------------------------------------------------------------------------------------
# The model directory


class Checkpoint:
    """A model directory: config, index, shards. `get(name)` returns the stored tensor (CPU, stored dtype)."""

    def __init__(self, model_dir):
        self.dir = model_dir
        self.config, self.config_bytes = load_config(model_dir)
        index_path = os.path.join(model_dir, "model.safetensors.index.json")
        if os.path.exists(index_path):
            with open(index_path) as f:
                self.weight_map = json.load(f)["weight_map"]
        elif os.path.exists(os.path.join(model_dir, "model.safetensors")):
            self.weight_map = None  # single-file checkpoint: filled from its header below
        else:
            raise CheckpointError("%s: neither model.safetensors.index.json nor model.safetensors" % model_dir)
        if self.weight_map is None:
            shard = safetensors_io.open_shard(os.path.join(model_dir, "model.safetensors"))
            self.weight_map = {n: "model.safetensors" for n in shard.names()}
        missing = sorted({s for s in self.weight_map.values() if not os.path.exists(os.path.join(model_dir, s))})
        if missing:
            raise CheckpointError("%s: the index names missing shards: %s" % (index_path, missing))
        self._shards = {}

    def shard(self, file):
        if file not in self._shards:
            self._shards[file] = safetensors_io.open_shard(os.path.join(self.dir, file))
        return self._shards[file]

    def info(self, name):
        file = self.weight_map.get(name)
        if file is None:
            return None
        s = self.shard(file)
        if name not in s.header:
            raise CheckpointError("index says %s is in %s, but that shard has no such tensor" % (name, file))
        return s.info(name)

    def validate(self):
        """Checks every tensor the config needs (presence, dtype, shape) and reports tensors nothing reads.

        Raises one CheckpointError listing every problem."""
        problems = []
        wanted = set()
        for name, dtype, shape in all_specs(self.config):
            wanted.add(name)
            got = self.info(name)
            if got is None:
                problems.append("tensor %s: missing (want %s %s)" % (name, shape, dtype))
            elif got[0] != dtype or list(got[1]) != list(shape):
                problems.append("tensor %s: want %s %s, got %s %s" % (name, shape, dtype, got[1], got[0]))
        unused = sorted(n for n in self.weight_map if n not in wanted and not n.startswith(SKIPPED_PREFIXES))
        problems += ["tensor %s: present but unused by the K3 forward" % n for n in unused[:20]]
        if len(unused) > 20:
            problems.append("... and %d more unused tensors" % (len(unused) - 20))
        if problems:
            raise CheckpointError("%s: %d problem(s):\n  %s" % (self.dir, len(problems), "\n  ".join(problems)))

    def get(self, name, dtype=None, shape=None):
        got = self.info(name)
        if got is None:
            raise CheckpointError("tensor %s: missing" % name)
        if (dtype is not None and got[0] != dtype) or (shape is not None and list(got[1]) != list(shape)):
            raise CheckpointError("tensor %s: want %s %s, got %s %s" % (name, shape, dtype, got[1], got[0]))
        return self.shard(self.weight_map[name]).get(name)
