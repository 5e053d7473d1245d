"""A trainable K3 (spec 5) built from k3_ref's own functions, batched and with autograd.

The forward is the one k3_ref.py defines, in fp32 (k3_ref.Numerics("fp32") rounds nothing): the same
RMSNorm, SiTU, AttnRes mix, KDA gate (the lower-bound form), KDA chunked delta rule, NoPE gated MLA and
Stable LatentMoE routing (sigmoid scores, correction bias that only selects, renormalised weights). What
is new here is only what training needs:
  - a batch dimension: KDA and MLA fold the batch into their head dimension, so k3_ref's per-head
    kda_chunked and causal_softmax_attention run unchanged on [T, batch*heads, d];
  - routed experts held stacked per layer ([E, out, in]) and run by a loop over the chosen experts;
  - fake quantisation for the quantisation-aware last steps (bf16 weights, MXFP4 routed experts), with a
    straight-through gradient;
  - the aux-loss-free load balancing of K3's correction bias (update_bias).

Parameters live in a dict keyed by the checkpoint's tensor names (experts stacked under a per-layer key),
so export.py writes them with no renaming table. This is a development tool that makes the demo model;
it never reads or writes Kimi K3's weights.
"""

import math
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import k3_ref  # noqa: E402
from checkpoint import PREFIX, LM_HEAD  # noqa: E402

import mxfp4  # noqa: E402

NM = k3_ref.Numerics("fp32")

# KDA_CHUNK is the chunk of k3_ref.kda_chunked in training: short chunks keep its [C, C, heads, d] decay
# tensor small (the closed form is exact for any chunk length).
KDA_CHUNK = 16

# DENSE_EXPERTS runs the routed experts as dense einsums (see moe); False: a loop over the chosen experts.
DENSE_EXPERTS = True


def experts_key(i, w):
    """The parameter key of layer i's stacked routed experts w (w1, w2 or w3): [E, out, in]."""
    return PREFIX + "layers.%d.block_sparse_moe.experts.%s" % (i, w)


def bias_key(i):
    return PREFIX + "layers.%d.block_sparse_moe.gate.e_score_correction_bias" % i


def init_params(cfg, gen):
    """Fresh fp32 parameters for cfg, keyed by checkpoint name (experts stacked). Returns (params, buffers):
    the correction biases are buffers (set by update_bias, never by the gradient)."""
    H = cfg.hidden
    P, Bf = {}, {}

    def lin(name, out_f, in_f, gain=1.0):
        P[name] = torch.randn(out_f, in_f, generator=gen) * (gain / math.sqrt(in_f))

    def ones(name, n):
        P[name] = torch.ones(n)

    P[PREFIX + "embed_tokens.weight"] = torch.randn(cfg.vocab, H, generator=gen)
    lin(LM_HEAD, cfg.vocab, H, 0.5)
    ones(PREFIX + "norm.weight", H)
    ones(PREFIX + "output_attn_res_norm.weight", H)
    P[PREFIX + "output_attn_res_proj.weight"] = torch.zeros(1, H)  # uniform mixing at the start
    for i in range(cfg.num_layers):
        p = PREFIX + "layers.%d." % i
        for n in ("input_layernorm", "post_attention_layernorm", "self_attention_res_norm", "mlp_res_norm"):
            ones(p + n + ".weight", H)
        for n in ("self_attention_res_proj", "mlp_res_proj"):
            P[p + n + ".weight"] = torch.zeros(1, H)
        a = p + "self_attn."
        out_gain = 1.0 / math.sqrt(2 * cfg.num_layers)
        if cfg.is_mla(i):
            nh = cfg.mla_heads
            lin(a + "q_a_proj.weight", cfg.q_lora_rank, H)
            ones(a + "q_a_layernorm.weight", cfg.q_lora_rank)
            lin(a + "q_b_proj.weight", nh * (cfg.qk_nope + cfg.qk_rope), cfg.q_lora_rank)
            lin(a + "kv_a_proj_with_mqa.weight", cfg.kv_lora_rank + cfg.qk_rope, H)
            ones(a + "kv_a_layernorm.weight", cfg.kv_lora_rank)
            lin(a + "kv_b_proj.weight", nh * (cfg.qk_nope + cfg.v_head), cfg.kv_lora_rank)
            lin(a + "g_proj.weight", nh * cfg.v_head, H)
            lin(a + "o_proj.weight", H, nh * cfg.v_head, out_gain)
        else:
            nh, d = cfg.kda_heads, cfg.kda_head_dim
            C = nh * d
            for n in ("q_proj", "k_proj", "v_proj", "g_proj"):
                lin(a + n + ".weight", C, H)
            for n in ("q_conv1d", "k_conv1d", "v_conv1d"):
                w = torch.randn(C, 1, cfg.conv_kernel, generator=gen) * 0.2
                w[:, 0, -1] += 1.0  # start near the identity on the current token
                P[a + n + ".weight"] = w
            lin(a + "f_a_proj.weight", d, H)
            lin(a + "f_b_proj.weight", C, d)
            lin(a + "b_proj.weight", nh, H)
            P[a + "A_log"] = torch.zeros(nh)  # exported padded (see export.py)
            # dt_bias spreads the initial decay e^g over heads and channels: memories from a few to
            # hundreds of tokens (g = -5 sigma(dt_bias) at graw = 0).
            P[a + "dt_bias"] = torch.empty(C).uniform_(-9.0, -1.0, generator=gen)
            ones(a + "o_norm.weight", d)
            lin(a + "o_proj.weight", H, C, out_gain)
        if cfg.is_moe(i):
            m = p + "block_sparse_moe."
            E, L, I, S = cfg.num_experts, cfg.latent, cfg.moe_inter, cfg.num_shared * cfg.moe_inter
            lin(m + "gate.weight", E, H)
            Bf[bias_key(i)] = torch.zeros(E)
            lin(m + "routed_expert_down_proj.weight", L, H)
            ones(m + "routed_expert_norm.weight", L)
            lin(m + "routed_expert_up_proj.weight", H, L, out_gain)
            lin(m + "shared_experts.gate_proj.weight", S, H)
            lin(m + "shared_experts.up_proj.weight", S, H)
            lin(m + "shared_experts.down_proj.weight", H, S, out_gain)
            P[experts_key(i, "w1")] = torch.randn(E, I, L, generator=gen) / math.sqrt(L)
            P[experts_key(i, "w3")] = torch.randn(E, I, L, generator=gen) / math.sqrt(L)
            P[experts_key(i, "w2")] = torch.randn(E, L, I, generator=gen) / math.sqrt(I)
        else:
            f = p + "mlp."
            lin(f + "gate_proj.weight", cfg.dense_inter, H)
            lin(f + "up_proj.weight", cfg.dense_inter, H)
            lin(f + "down_proj.weight", H, cfg.dense_inter, out_gain)
    return P, Bf


# ----------------------------------------------------------------------------------------------------------
# Fake quantisation (straight-through): what export.py stores


def ste(w, q):
    """q in the forward, the identity's gradient in the backward."""
    return w + (q - w).detach()


def bf16(w):
    return w.to(torch.bfloat16).to(torch.float32)


class Weights:
    """Reads parameters for the forward: as they are, or as export stores them (qat=True): BF16 tensors
    rounded to bf16, routed experts through MXFP4, F32 tensors as they are."""

    F32_SUFFIXES = ("conv1d.weight", "A_log", "dt_bias", "o_norm.weight")

    def __init__(self, params, buffers, qat=False):
        self.P, self.B, self.qat = params, buffers, qat

    def __getitem__(self, name):
        w = self.P[name]
        if not self.qat or name.endswith(self.F32_SUFFIXES):
            return w
        if ".experts." in name:
            return ste(w, mxfp4.fake_quant(w.detach()))
        return ste(w, bf16(w.detach()))


# ----------------------------------------------------------------------------------------------------------
# Batched layers (x: [B, T, H])


def short_conv_silu(x, w):
    """k3_ref.short_conv_silu for a batch: out_t[c] = SiLU(sum_i w[c,0,i] x_{t-K+1+i}[c]), zeros before 0."""
    K = w.shape[-1]
    y = F.conv1d(F.pad(x.transpose(1, 2), (K - 1, 0)), w, groups=w.shape[0])
    return F.silu(y.transpose(1, 2))


def heads_first(x):
    """[B, T, nh, d] -> [T, B*nh, d]: the batch becomes more heads for k3_ref's per-head kernels."""
    B, T, nh, d = x.shape
    return x.permute(1, 0, 2, 3).reshape(T, B * nh, d)


def heads_back(x, B):
    """[T, B*nh, d] -> [B, T, nh, d]."""
    T, Bnh, d = x.shape
    return x.reshape(T, B, Bnh // B, d).permute(1, 0, 2, 3)


def kda(cfg, W, a, x):
    """KDA (spec 5.2) on the normed x [B, T, H]."""
    B, T, _ = x.shape
    nh, d = cfg.kda_heads, cfg.kda_head_dim
    q = short_conv_silu(x @ W[a + "q_proj.weight"].t(), W[a + "q_conv1d.weight"]).view(B, T, nh, d)
    k = short_conv_silu(x @ W[a + "k_proj.weight"].t(), W[a + "k_conv1d.weight"]).view(B, T, nh, d)
    v = short_conv_silu(x @ W[a + "v_proj.weight"].t(), W[a + "v_conv1d.weight"]).view(B, T, nh, d)
    graw = (x @ W[a + "f_a_proj.weight"].t()) @ W[a + "f_b_proj.weight"].t()
    beta = torch.sigmoid(x @ W[a + "b_proj.weight"].t())  # [B, T, nh]
    gout = x @ W[a + "g_proj.weight"].t()
    q = k3_ref.l2_normalize(q) * (d ** -0.5)
    k = k3_ref.l2_normalize(k)
    g = k3_ref.kda_gate(graw.view(B, T, nh, d), W[a + "A_log"][:nh], W[a + "dt_bias"].view(nh, d),
                        cfg.gate_lower_bound)
    o, _ = k3_ref.kda_chunked(heads_first(q), heads_first(k), heads_first(v), heads_first(g),
                              beta.permute(1, 0, 2).reshape(T, B * nh), chunk=KDA_CHUNK)
    o = heads_back(o, B)
    o = k3_ref.rms_norm(NM, o, W[a + "o_norm.weight"], cfg.rms_eps)
    o = o * torch.sigmoid(gout.view(B, T, nh, d))
    return o.reshape(B, T, nh * d) @ W[a + "o_proj.weight"].t()


def mla(cfg, W, a, x):
    """Gated MLA without positions (spec 5.3) on the normed x [B, T, H]."""
    B, T, _ = x.shape
    nh, dn, dr, dv, r = cfg.mla_heads, cfg.qk_nope, cfg.qk_rope, cfg.v_head, cfg.kv_lora_rank
    c_q = k3_ref.rms_norm(NM, x @ W[a + "q_a_proj.weight"].t(), W[a + "q_a_layernorm.weight"], k3_ref.MLA_NORM_EPS)
    q = (c_q @ W[a + "q_b_proj.weight"].t()).view(B, T, nh, dn + dr)
    kv = x @ W[a + "kv_a_proj_with_mqa.weight"].t()
    c_kv = k3_ref.rms_norm(NM, kv[..., :r], W[a + "kv_a_layernorm.weight"], k3_ref.MLA_NORM_EPS)
    k_s = kv[..., r:]
    kvb = (c_kv @ W[a + "kv_b_proj.weight"].t()).view(B, T, nh, dn + dv)
    k_nope, v = kvb[..., :dn], kvb[..., dn:]
    k = torch.cat([k_nope, k_s[:, :, None, :].expand(B, T, nh, dr)], dim=-1)
    o = k3_ref.causal_softmax_attention(heads_first(q), heads_first(k), heads_first(v), 1.0 / math.sqrt(dn + dr))
    o = heads_back(o, B).reshape(B, T, nh * dv)
    o = o * torch.sigmoid(x @ W[a + "g_proj.weight"].t())
    return o @ W[a + "o_proj.weight"].t()


def ffn(cfg, x, w_gate, w_up, w_down):
    """SiTU-GLU FFN (spec 5.4)."""
    return k3_ref.situ(x @ w_gate.t(), x @ w_up.t(), cfg.situ_beta, cfg.situ_linear_beta) @ w_down.t()


def moe(cfg, W, i, x, loads):
    """Stable LatentMoE (spec 5.5) on the normed x [B, T, H]; appends this layer's expert load to loads."""
    m = PREFIX + "layers.%d.block_sparse_moe." % i
    shape = x.shape
    x = x.reshape(-1, shape[-1])
    s = torch.sigmoid(x @ W[m + "gate.weight"].t())  # [N, E]
    with torch.no_grad():
        chosen = torch.topk(s + W.B[bias_key(i)], cfg.top_k, dim=-1).indices  # the bias only selects
    weights = torch.gather(s, 1, chosen)
    weights = weights / (weights.sum(dim=-1, keepdim=True) + k3_ref.ROUTER_DENOM_EPS) * cfg.routed_scale
    z = x @ W[m + "routed_expert_down_proj.weight"].t()  # [N, latent]
    w1, w2, w3 = W[experts_key(i, "w1")], W[experts_key(i, "w2")], W[experts_key(i, "w3")]
    if DENSE_EXPERTS:
        # every expert on every token, combined with zero weight for the unchosen: the same sum as the
        # loop below in a handful of large ops (cheaper on a CPU, where the op count dominates)
        comb = torch.zeros_like(s).scatter(1, chosen, weights)  # [N, E]
        a = torch.einsum("nl,eil->nei", z, w1)
        b = torch.einsum("nl,eil->nei", z, w3)
        h = k3_ref.situ(a, b, cfg.situ_beta, cfg.situ_linear_beta)
        acc = torch.einsum("nel,ne->nl", torch.einsum("nei,eli->nel", h, w2), comb)
    else:
        acc = torch.zeros_like(z)
        for e in range(cfg.num_experts):
            rows, slot = (chosen == e).nonzero(as_tuple=True)
            if rows.numel() == 0:
                continue
            h = ffn(cfg, z[rows], w1[e], w3[e], w2[e])
            acc = acc.index_add(0, rows, weights[rows, slot][:, None] * h)
    loads.append(torch.bincount(chosen.flatten(), minlength=cfg.num_experts).float() / chosen.numel())
    r = k3_ref.rms_norm(NM, acc, W[m + "routed_expert_norm.weight"], cfg.rms_eps)
    y = r @ W[m + "routed_expert_up_proj.weight"].t() + ffn(
        cfg, x, W[m + "shared_experts.gate_proj.weight"], W[m + "shared_experts.up_proj.weight"],
        W[m + "shared_experts.down_proj.weight"])
    return y.reshape(shape)


def output_logits(cfg, W, blocks, p):
    """h = AR(B + [p]; output_attn_res); logits = lm_head(RMSNorm(h; norm)) (spec 5.1, the last lines)."""
    gw = W[PREFIX + "output_attn_res_norm.weight"] * W[PREFIX + "output_attn_res_proj.weight"][0]
    h, _ = k3_ref.attn_res_mix(NM, blocks + [p], gw)
    x = k3_ref.rms_norm(NM, h, W[PREFIX + "norm.weight"], cfg.rms_eps)
    return x @ W[LM_HEAD].t()


def forward(cfg, W, ids, lens=False):
    """Logits [B, T, V] for ids [B, T] (spec 5.1's layer loop), the per-MoE-layer expert loads, and with
    lens the logit-lens logits after every layer (the output mix over the blocks so far, norm, lm_head)."""
    p = W[PREFIX + "embed_tokens.weight"][ids]
    blocks, loads, lens_out = [], [], []
    for i in range(cfg.num_layers):
        lp = PREFIX + "layers.%d." % i
        p_in = p
        if not blocks:
            h = p_in
        else:
            gw = W[lp + "self_attention_res_norm.weight"] * W[lp + "self_attention_res_proj.weight"][0]
            h, _ = k3_ref.attn_res_mix(NM, blocks + [p_in], gw)
        empty = i % cfg.block_size == 0
        if empty:
            blocks = blocks + [p_in]
        x = k3_ref.rms_norm(NM, h, W[lp + "input_layernorm.weight"], cfg.rms_eps)
        a = mla(cfg, W, lp + "self_attn.", x) if cfg.is_mla(i) else kda(cfg, W, lp + "self_attn.", x)
        p = a if empty else p_in + a
        gw = W[lp + "mlp_res_norm.weight"] * W[lp + "mlp_res_proj.weight"][0]
        h, _ = k3_ref.attn_res_mix(NM, blocks + [p], gw)
        x = k3_ref.rms_norm(NM, h, W[lp + "post_attention_layernorm.weight"], cfg.rms_eps)
        if cfg.is_moe(i):
            m = moe(cfg, W, i, x, loads)
        else:
            f = lp + "mlp."
            m = ffn(cfg, x, W[f + "gate_proj.weight"], W[f + "up_proj.weight"], W[f + "down_proj.weight"])
        p = p + m
        if lens:
            lens_out.append(output_logits(cfg, W, blocks, p))
    return output_logits(cfg, W, blocks, p), loads, lens_out


def update_bias(cfg, buffers, loads, rate):
    """K3's aux-loss-free balancing: raise the correction bias of under-used experts and lower that of
    over-used ones by rate (the sign of the load's deviation from uniform), so that every expert is chosen."""
    moe_layers = cfg.moe_layers()
    for i, load in zip(moe_layers, loads):
        b = buffers[bias_key(i)]
        b += rate * torch.sign(1.0 / cfg.num_experts - load)
