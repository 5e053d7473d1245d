#!/usr/bin/env python3
"""An independent PyTorch reference of the Kimi K3 text forward (teacher-forced prefill), from K3_SPEC.md.

Each function implements one concept of the spec and names its section. Sequences are computed one at a time
(nothing is batched across sequences); the layer loop is layer-major (every sequence goes through layer i
before layer i+1 is loaded) only so that one layer's weights are in memory at a time.

Precision modes
  fp32  every activation in fp32, weights exact (bf16/F32 as stored, MXFP4 decoded exactly); fp32 matmuls.
  fp64  the same in float64 (a debug mode: a second opinion on the fp32 results).
  bf16  the rounding contract below; the Go engine's bf16 mode follows the same list.

bf16 rounding contract ("round" = round to nearest bfloat16, ties to even, kept as an fp32 value)
  (a) matmul: bf16-valued inputs, computed as an fp32 matmul of those values, output rounded to bf16.
  (b) RMSNorm: fp32 mean of squares of the (bf16) input; n = round(x * rsqrt(mean + eps));
      out = round(n * w) (w upcast to fp32, product rounded).
  (c) AttnRes mix in fp32, output rounded to bf16; the running sum p and the block list B are bf16
      (p = round(p + a)).
  (d) KDA: q, k, v, g_proj, f_a, f_b, b projections are matmuls (bf16 outputs); short conv + SiLU in fp32,
      output rounded to bf16; the L2 norms, gate, beta and the delta-rule recurrence in fp32; the recurrence
      output o rounded to bf16; o_norm RMSNorm per head as (b) (its weight is F32 in the file); times
      sigmoid(gout) in fp32, rounded to bf16; then o_proj (a).
  (e) MLA: projections (a); the two RMSNorms as (b); scores and softmax fp32; attention output rounded to bf16;
      times sigmoid(W_g x) rounded to bf16; o_proj (a).
  (f) SiTU in fp32 on the bf16 gate/up outputs, rounded to bf16 before the down matmul.
  (g) MoE (spec 5.5): router in fp32 on the bf16 x with fp32-upcast weights; each expert's output is bf16
      (its down matmul), times its fp32 weight, summed in fp32 in ascending expert-id order, rounded to bf16;
      RMSNorm (b); up-latent matmul (a); plus the shared FFN output: y = round(up + shared).
  (h) sublayer results are added to p as in (c).
  (i) logits = lm_head output rounded to bf16 (a), then log-softmax in fp32.
Router tie-break: among equal selection scores the lower expert index wins (a stable sort on -score).

Usage: k3_ref.py MODEL_DIR --ids 1,2,3 [--precision fp32|bf16|fp64] [--device cpu|cuda] [--kda step|chunk]
"""

import argparse
import math
import sys
import time

import torch
import torch.nn.functional as F

import checkpoint as ckpt_mod
from checkpoint import PREFIX, LM_HEAD

# Epsilons fixed by the spec (not read from the config): MLA's two latent norms use 1e-6, the KDA L2 norms 1e-6,
# AttnRes 1e-5. rms_norm_eps (1e-5 in K3) is used for the layer norms, o_norm and the routed-expert norm.
MLA_NORM_EPS = 1e-6
L2_NORM_EPS = 1e-6
ATTN_RES_EPS = 1e-5
ROUTER_DENOM_EPS = 1e-20


def deterministic_matmuls():
    """fp32 must mean fp32: no TF32 on Ampere+ GPUs."""
    if hasattr(torch, "set_float32_matmul_precision"):
        torch.set_float32_matmul_precision("highest")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False


# ----------------------------------------------------------------------------------------------------------
# Numerics: where bf16 rounding happens (contract above)


class Numerics:
    def __init__(self, precision="fp32", device="cpu"):
        if precision not in ("fp32", "bf16", "fp64"):
            raise ValueError("precision %r: want fp32, bf16 or fp64" % precision)
        self.precision = precision
        self.bf16 = precision == "bf16"
        self.dtype = torch.float64 if precision == "fp64" else torch.float32
        self.device = torch.device(device)

    def round(self, x):
        """Round to bf16 in bf16 mode (kept in fp32); identity otherwise."""
        if self.bf16:
            return x.to(torch.bfloat16).to(self.dtype)
        return x

    def weight(self, t):
        """A stored weight (BF16 or F32) as an exact activation-dtype tensor on the device."""
        return t.to(device=self.device, dtype=self.dtype)

    def matmul(self, x, w):
        """(a): x [..., in] @ w[out, in]^T, output rounded to bf16 in bf16 mode."""
        return self.round(torch.matmul(x, w.t()))


# ----------------------------------------------------------------------------------------------------------
# Small ops


def rms_norm(nm, x, w, eps):
    """RMSNorm(x; w) = w * x / sqrt(mean(x^2) + eps) over the last dim; rounding per contract (b)."""
    mean_sq = (x * x).mean(dim=-1, keepdim=True)
    n = nm.round(x * torch.rsqrt(mean_sq + eps))
    return nm.round(n * w)


def l2_normalize(x, eps=L2_NORM_EPS):
    """x / sqrt(sum(x^2) + eps) over the last dim (spec 5.2 step 3)."""
    return x * torch.rsqrt((x * x).sum(dim=-1, keepdim=True) + eps)


def situ(a, b, beta, linear_beta):
    """SiTU(a, b) = [beta tanh(a/beta) sigma(a)] * [linear_beta tanh(b/linear_beta)] (spec 5.4), no rounding.

    a comes from the gate projection (w1 / gate_proj), b from the up projection (w3 / up_proj)."""
    return (beta * torch.tanh(a / beta) * torch.sigmoid(a)) * (linear_beta * torch.tanh(b / linear_beta))


def ffn(nm, cfg, x, w_gate, w_up, w_down):
    """FFN(x) = W_down SiTU(W_gate x, W_up x) (spec 5.4); SiTU output rounded to bf16 per (f)."""
    a = nm.matmul(x, w_gate)
    b = nm.matmul(x, w_up)
    h = nm.round(situ(a, b, cfg.situ_beta, cfg.situ_linear_beta))
    return nm.matmul(h, w_down)


def rank_desc(scores):
    """Indices that sort `scores` (last dim) descending; among equal scores the lower index comes first."""
    return torch.sort(-scores, dim=-1, stable=True).indices


# ----------------------------------------------------------------------------------------------------------
# AttnRes (spec 5.1)


def attn_res_mix(nm, vectors, gw):
    """AR(V; w, gamma) over vectors v_0..v_m (each [T, H]), gw = gamma * w folded (fp32, [H]).

    score_i = (sum_d gw_d v_i[d]) / sqrt(mean_d v_i[d]^2 + 1e-5); p = softmax_i(score); AR = sum_i p_i v_i
    (the raw vectors). Computed in the activation dtype, output rounded to bf16 (c). Returns (AR, p [m+1, T]).
    Leading dims beyond T (a batch: vectors [B, T, H]) broadcast, for the trainer (k3_ref/train)."""
    V = torch.stack(vectors, dim=0)  # [m+1, T, H]
    inv_rms = torch.rsqrt((V * V).mean(dim=-1) + ATTN_RES_EPS)  # [m+1, T]
    score = torch.matmul(V, gw) * inv_rms  # [m+1, T]
    p = torch.softmax(score, dim=0)
    out = (p[..., None] * V).sum(dim=0)
    return nm.round(out), p


# ----------------------------------------------------------------------------------------------------------
# KDA (spec 5.2)


def short_conv_silu(x, w):
    """Causal depthwise conv + SiLU: out_t[c] = SiLU(sum_{i<K} w[c,0,i] * x_{t-K+1+i}[c]), zeros before t = 0.

    x [T, C], w [C, 1, K]; tap K-1 multiplies the current token. No rounding here."""
    T, C = x.shape
    K = w.shape[-1]
    padded = torch.cat([x.new_zeros(K - 1, C), x], dim=0)  # padded[t + K - 1] = x[t]
    acc = x.new_zeros(T, C)
    for i in range(K):
        acc = acc + w[:, 0, i] * padded[i:i + T]
    return F.silu(acc)


def kda_gate(graw, A_log, dt_bias, lower_bound):
    """g[t,h,d] = lower_bound * sigma(exp(A_log[h]) * (graw[t,h,d] + dt_bias[h,d])), in (lower_bound, 0).

    graw [T, nh, d], A_log [nh], dt_bias [nh, d]. The lower bound scales a sigmoid; it is not a clamp, and
    this is not Kimi Linear's -exp(A_log) softplus form."""
    return lower_bound * torch.sigmoid(torch.exp(A_log)[None, :, None] * (graw + dt_bias[None]))


def kda_recurrent(q, k, v, g, beta, S0=None):
    """The delta rule, one token at a time (spec 5.2 step 6). The definition; kda_chunked must equal it.

    q, k, g [T, nh, dk]; v [T, nh, dv]; beta [T, nh]; state S [nh, dk, dv] (key rows x value columns):
      S' = diag(e^g_t) S;  u_t = beta_t (v_t - S'^T k_t);  S = S' + k_t u_t^T;  o_t = S^T q_t.
    Returns (o [T, nh, dv], final S)."""
    T, nh, dk = k.shape
    dv = v.shape[-1]
    S = q.new_zeros(nh, dk, dv) if S0 is None else S0.clone()
    out = q.new_zeros(T, nh, dv)
    for t in range(T):
        S = S * torch.exp(g[t])[:, :, None]
        predicted = torch.einsum("hkv,hk->hv", S, k[t])  # S'^T k_t
        u = beta[t][:, None] * (v[t] - predicted)
        S = S + k[t][:, :, None] * u[:, None, :]
        out[t] = torch.einsum("hkv,hk->hv", S, q[t])
    return out, S


def kda_chunk(q, k, v, g, beta, S0):
    """One chunk (positions 1..C) of the delta rule in closed form, starting from state S0 [nh, dk, dv].

    With G_i = sum_{j<=i} g_j (cumulative log decay) and D_ij = exp(G_i - G_j) (j <= i), unrolling the step form:
      S_i = diag(e^G_i) S0 + sum_{j<=i} diag(D_ij) k_j u_j^T,
      u_i + sum_{j<i} beta_i (k_i . D_ij . k_j) u_j = beta_i (v_i - S0^T (e^G_i * k_i)),
      o_i = S0^T (e^G_i * q_i) + sum_{j<=i} (q_i . D_ij . k_j) u_j,
    so U solves a unit lower-triangular system (I + A) U = R per head. Returns (o [C, nh, dv], S_C)."""
    C, nh, dk = k.shape
    G = torch.cumsum(g, dim=0)  # [C, nh, dk], non-increasing along C
    idx = torch.arange(C, device=q.device)
    incl = idx[:, None] >= idx[None, :]  # j <= i
    strict = idx[:, None] > idx[None, :]  # j < i
    # exponent masked to -inf above the diagonal (it is positive there and could overflow)
    pair = (G[:, None] - G[None, :]).masked_fill(~incl[:, :, None, None], float("-inf"))
    D = torch.exp(pair)  # [C(i), C(j), nh, dk]
    KK = torch.einsum("ihd,jhd,ijhd->hij", k, k, D)
    QK = torch.einsum("ihd,jhd,ijhd->hij", q, k, D)
    A = beta.t()[:, :, None] * KK * strict  # [nh, i, j]
    eG = torch.exp(G)
    R = beta[:, :, None] * (v - torch.einsum("ihd,hdv->ihv", eG * k, S0))  # [C, nh, dv]
    eye = torch.eye(C, dtype=q.dtype, device=q.device)
    U = torch.linalg.solve_triangular(eye + A, R.transpose(0, 1), upper=False, unitriangular=True)  # [nh, C, dv]
    o = torch.einsum("ihd,hdv->ihv", eG * q, S0) + torch.einsum("hij,hjv->ihv", QK * incl, U)
    decay_to_end = torch.exp(G[-1][None] - G)  # [C, nh, dk] = D_{C,j}
    S = torch.exp(G[-1])[:, :, None] * S0 + torch.einsum("jhd,hjv->hdv", decay_to_end * k, U)
    return o, S


def kda_chunked(q, k, v, g, beta, chunk=64, S0=None):
    """The delta rule in chunks of `chunk` tokens (what fast kernels do): kda_chunk on each, carrying S."""
    T, nh, dk = k.shape
    dv = v.shape[-1]
    S = q.new_zeros(nh, dk, dv) if S0 is None else S0
    outs = []
    for s in range(0, T, chunk):
        e = min(T, s + chunk)
        o, S = kda_chunk(q[s:e], k[s:e], v[s:e], g[s:e], beta[s:e], S)
        outs.append(o)
    return torch.cat(outs, dim=0), S


def kda_attention(nm, cfg, W, x, impl="step"):
    """KDA layer (spec 5.2) on the normed input x [T, H]; returns y [T, H]."""
    T = x.shape[0]
    nh, d = cfg.kda_heads, cfg.kda_head_dim
    # 1. projections (a)
    q_raw = nm.matmul(x, W["q_proj"])
    k_raw = nm.matmul(x, W["k_proj"])
    v_raw = nm.matmul(x, W["v_proj"])
    graw = nm.matmul(nm.matmul(x, W["f_a_proj"]), W["f_b_proj"])
    braw = nm.matmul(x, W["b_proj"])
    gout = nm.matmul(x, W["g_proj"])
    # 2. short conv + SiLU, rounded (d)
    q = nm.round(short_conv_silu(q_raw, W["q_conv1d"])).view(T, nh, d)
    k = nm.round(short_conv_silu(k_raw, W["k_conv1d"])).view(T, nh, d)
    v = nm.round(short_conv_silu(v_raw, W["v_conv1d"])).view(T, nh, d)
    # 3. per-head L2 norms; q scaled by d^-0.5
    q = l2_normalize(q) * (d ** -0.5)
    k = l2_normalize(k)
    # 4, 5. decay gate and beta
    g = kda_gate(graw.view(T, nh, d), W["A_log"][:nh], W["dt_bias"].view(nh, d), cfg.gate_lower_bound)
    beta = torch.sigmoid(braw)
    # 6. recurrence
    if impl == "step":
        o, _ = kda_recurrent(q, k, v, g, beta)
    elif impl == "chunk":
        o, _ = kda_chunked(q, k, v, g, beta)
    else:
        raise ValueError("kda impl %r: want step or chunk" % impl)
    o = nm.round(o)
    # 7. per-head o_norm, output gate, o_proj
    o = rms_norm(nm, o, W["o_norm"], cfg.rms_eps)
    o = nm.round(o * torch.sigmoid(gout.view(T, nh, d)))
    return nm.matmul(o.reshape(T, nh * d), W["o_proj"])


# ----------------------------------------------------------------------------------------------------------
# Gated MLA (spec 5.3)


def causal_softmax_attention(q, k, v, scale):
    """Masked full-matrix form: o_h(t) = sum_{s<=t} softmax_s(q_h(t).k_h(s) * scale) v_h(s).

    q, k [T, nh, dqk]; v [T, nh, dv] -> [T, nh, dv]."""
    T = q.shape[0]
    scores = torch.einsum("thd,shd->hts", q, k) * scale
    future = torch.triu(torch.ones(T, T, dtype=torch.bool, device=q.device), diagonal=1)
    scores = scores.masked_fill(future[None], float("-inf"))
    p = torch.softmax(scores, dim=-1)
    return torch.einsum("hts,shd->thd", p, v)


def causal_softmax_attention_rows(q, k, v, scale):
    """The same, one query row at a time over s = 0..t (the definition; used to test the masked form)."""
    T = q.shape[0]
    out = torch.empty(T, q.shape[1], v.shape[-1], dtype=q.dtype, device=q.device)
    for t in range(T):
        scores = torch.einsum("hd,shd->hs", q[t], k[:t + 1]) * scale
        p = torch.softmax(scores, dim=-1)
        out[t] = torch.einsum("hs,shd->hd", p, v[:t + 1])
    return out


def mla_attention(nm, cfg, W, x):
    """Gated MLA layer (spec 5.3), no positional encoding, on the normed input x [T, H]; returns y [T, H]."""
    T = x.shape[0]
    nh, dn, dr, dv, r = cfg.mla_heads, cfg.qk_nope, cfg.qk_rope, cfg.v_head, cfg.kv_lora_rank
    c_q = rms_norm(nm, nm.matmul(x, W["q_a_proj"]), W["q_a_layernorm"], MLA_NORM_EPS)
    q = nm.matmul(c_q, W["q_b_proj"]).view(T, nh, dn + dr)  # [q_nope | q_s] per head
    kv = nm.matmul(x, W["kv_a_proj_with_mqa"])
    c_kv = rms_norm(nm, kv[:, :r], W["kv_a_layernorm"], MLA_NORM_EPS)
    k_s = kv[:, r:]  # [T, dr], not normalised, shared by all heads
    kvb = nm.matmul(c_kv, W["kv_b_proj"]).view(T, nh, dn + dv)
    k_nope, v = kvb[:, :, :dn], kvb[:, :, dn:]
    k = torch.cat([k_nope, k_s[:, None, :].expand(T, nh, dr)], dim=-1)
    o = causal_softmax_attention(q, k, v, 1.0 / math.sqrt(dn + dr))
    o = nm.round(o.reshape(T, nh * dv))
    o = nm.round(o * torch.sigmoid(nm.matmul(x, W["g_proj"])))
    return nm.matmul(o, W["o_proj"])


# ----------------------------------------------------------------------------------------------------------
# Stable LatentMoE (spec 5.5)


def route(cfg, x, w_router, bias, forced=None):
    """Router in fp32 (or fp64) on x [T, H]: returns (chosen [T, k] in rank order, weights [T, k]).

    s = sigma(W_r x); choose the k largest s + bias (bias only selects; ties: lower index wins);
    weights = s / (sum of chosen s + 1e-20) * routed_scaling_factor.
    `forced` ([T, k] expert ids) replaces the choice (the weights still come from this s): a diagnostic that
    separates rounding error from routing flips; goldens never use it."""
    s = torch.sigmoid(torch.matmul(x, w_router.t()))
    chosen = rank_desc(s + bias)[:, :cfg.top_k] if forced is None else forced.to(x.device)
    weights = torch.gather(s, 1, chosen)
    if cfg.renormalize:
        weights = weights / (weights.sum(dim=-1, keepdim=True) + ROUTER_DENOM_EPS)
    return chosen, weights * cfg.routed_scale


def moe(nm, cfg, W, x, forced=None):
    """LatentMoE layer on the normed x [T, H]: returns (y [T, H], chosen ids [T, k], their weights [T, k])."""
    chosen, weights = route(cfg, x, W["gate"], W["gate.e_score_correction_bias"], forced)
    z = nm.matmul(x, W["routed_expert_down_proj"])  # [T, latent]
    acc = torch.zeros(z.shape, dtype=nm.dtype, device=nm.device)
    for e in sorted(set(chosen.flatten().tolist())):  # ascending expert id: each token's sum runs in that order
        rows, slot = (chosen == e).nonzero(as_tuple=True)
        w1, w2, w3 = W.expert(e)
        h = ffn(nm, cfg, z[rows], w1, w3, w2)  # bf16 output (its down matmul)
        acc[rows] = acc[rows] + weights[rows, slot][:, None] * h
    r = rms_norm(nm, nm.round(acc), W["routed_expert_norm"], cfg.rms_eps)
    up = nm.matmul(r, W["routed_expert_up_proj"])
    shared = ffn(nm, cfg, x, W["shared_experts.gate_proj"], W["shared_experts.up_proj"],
                 W["shared_experts.down_proj"])
    return nm.round(up + shared), chosen, weights


# ----------------------------------------------------------------------------------------------------------
# Weights of one layer


class LayerWeights(dict):
    """Name (relative to the layer's attention/FFN module) -> activation-dtype tensor; experts decoded lazily."""

    def __init__(self, ckpt, nm, layer):
        super().__init__()
        self.ckpt, self.nm, self.layer = ckpt, nm, layer
        self._experts = {}

    def expert(self, e):
        if e not in self._experts:
            p = PREFIX + "layers.%d.block_sparse_moe.experts.%d." % (self.layer, e)
            ws = []
            for w in ("w1", "w2", "w3"):
                packed = self.ckpt.get(p + w + ".weight_packed", "U8")
                scale = self.ckpt.get(p + w + ".weight_scale", "U8")
                ws.append(self.nm.weight(ckpt_mod.decode_mxfp4(packed, scale, p + w)))
            self._experts[e] = tuple(ws)
        return self._experts[e]


def load_layer(ckpt, nm, i):
    """Reads layer i's non-expert tensors (validated against checkpoint.layer_specs)."""
    cfg = ckpt.config
    W = LayerWeights(ckpt, nm, i)
    lp = PREFIX + "layers.%d." % i
    for name, dtype, shape in ckpt_mod.layer_specs(cfg, i):
        if ".experts." in name:
            continue
        key = name[len(lp):]
        for strip in ("self_attn.", "block_sparse_moe.", "mlp."):
            if key.startswith(strip):
                key = key[len(strip):]
        if key.endswith(".weight"):
            key = key[:-len(".weight")]
        W[key] = nm.weight(ckpt.get(name, dtype, shape))
    for site in ("self_attention_res", "mlp_res"):  # fold gamma * w once per site (spec 5.1)
        W[site + "_gw"] = W[site + "_norm"] * W[site + "_proj"][0]
    return W


# ----------------------------------------------------------------------------------------------------------
# The forward (spec 5.1)


class SequenceState:
    """Per-sequence AttnRes state: p (running partial sum, [T, H]) and B (completed block vectors)."""

    def __init__(self, ids, p, forced_router=None):
        self.ids = ids
        self.p = p
        self.forced_router = forced_router  # optional [T][moe layer][k] expert ids (diagnostic)
        self.blocks = []
        self.router = []  # per MoE layer: [T, k] chosen ids, in rank order
        self.router_weights = []  # per MoE layer: [T, k] their weights
        self.sum_sq = []  # per layer: sum over tokens and channels of p^2 after step 4 (float64)
        self.hidden = []  # per layer: p after step 4 as float32 [T, H], if recorded


def layer_step(nm, cfg, W, i, st, kda_impl="step"):
    """One layer of spec 5.1 for one sequence, updating st in place."""
    # 1.
    p_in = st.p
    if not st.blocks:
        h = p_in
    else:
        h, _ = attn_res_mix(nm, st.blocks + [p_in], W["self_attention_res_gw"])
    # 2.
    empty = False
    if i % cfg.block_size == 0:
        st.blocks.append(p_in)
        empty = True
    # 3.
    x = rms_norm(nm, h, W["input_layernorm"], cfg.rms_eps)
    a = mla_attention(nm, cfg, W, x) if cfg.is_mla(i) else kda_attention(nm, cfg, W, x, kda_impl)
    p = a if empty else nm.round(p_in + a)
    # 4.
    h, _ = attn_res_mix(nm, st.blocks + [p], W["mlp_res_gw"])
    x = rms_norm(nm, h, W["post_attention_layernorm"], cfg.rms_eps)
    if cfg.is_moe(i):
        forced = None
        if st.forced_router is not None:
            j = len(st.router)  # index of this MoE layer
            forced = torch.tensor([pos[j] for pos in st.forced_router], dtype=torch.long)
        m, chosen, weights = moe(nm, cfg, W, x, forced)
        st.router.append(chosen.cpu())
        st.router_weights.append(weights.double().cpu())
    else:
        m = ffn(nm, cfg, x, W["gate_proj"], W["up_proj"], W["down_proj"])
    st.p = nm.round(p + m)


def output_logprobs(nm, cfg, G, st):
    """After the last layer: h = AR(B + [p]; output_attn_res); logits = lm_head(RMSNorm(h; norm)) (i).

    Returns log-softmax [T, V] in the activation dtype (fp32 in fp32 and bf16 modes)."""
    h, _ = attn_res_mix(nm, st.blocks + [st.p], G["output_gw"])
    x = rms_norm(nm, h, G["norm"], cfg.rms_eps)
    logits = nm.matmul(x, G["lm_head"])
    return torch.log_softmax(logits, dim=-1)


def summarize(logp, ids, top_k):
    """Per-token reductions of log-softmax [T, V]: next-token logprob, entropy, top-k (ties: lower id first)."""
    T = logp.shape[0]
    ids_t = torch.tensor(ids, dtype=torch.long, device=logp.device)
    target = logp[torch.arange(T - 1, device=logp.device), ids_t[1:]]  # empty when T = 1
    entropy = -(torch.exp(logp) * logp).sum(dim=-1)
    order = rank_desc(logp)[:, :top_k]
    return {
        "logprob": target.double().cpu().tolist(),
        "entropy": entropy.double().cpu().tolist(),
        "topk_ids": order.cpu().tolist(),
        "topk_logprobs": torch.gather(logp, 1, order).double().cpu().tolist(),
        "sum_prob": torch.exp(logp.double()).sum(dim=-1).cpu().tolist(),
    }


def run(ckpt, sequences, precision="fp32", device="cpu", kda_impl="step", record_hidden=False, top_k=8,
        log=None, forced_router=None):
    """The forward of every sequence (lists of token ids). Returns a list of per-sequence result dicts:
    logprob, entropy, topk_ids, topk_logprobs, sum_prob; router and router_weights ([T][moe layer][k]);
    sum_sq (per layer, the sum of p^2 after step 4); hidden ([layers, T, H] float32, p after step 4) when
    record_hidden. forced_router (one [T][moe layer][k] list per sequence, e.g. another run's "router")
    overrides the routing choice (diagnostic)."""
    deterministic_matmuls()
    cfg = ckpt.config
    nm = Numerics(precision, device)
    for ids in sequences:
        if not ids:
            raise ValueError("empty sequence")
        bad = [t for t in ids if not 0 <= t < cfg.vocab]
        if bad:
            raise ValueError("token ids outside [0, %d): %s" % (cfg.vocab, bad[:5]))
    emb = ckpt.get(PREFIX + "embed_tokens.weight", "BF16", [cfg.vocab, cfg.hidden])
    forced_router = forced_router or [None] * len(sequences)
    states = [SequenceState(ids, nm.weight(emb[torch.tensor(ids, dtype=torch.long)]), fr)
              for ids, fr in zip(sequences, forced_router)]
    del emb
    for i in range(cfg.num_layers):
        t0 = time.time()
        W = load_layer(ckpt, nm, i)
        for st in states:
            layer_step(nm, cfg, W, i, st, kda_impl)
            st.sum_sq.append(float((st.p.double() ** 2).sum().item()))
            if record_hidden:
                st.hidden.append(st.p.to(torch.float32).cpu())
        if log:
            log("layer %d (%s): %.2fs" % (i, cfg.kind(i), time.time() - t0))
        del W
    G = {
        "norm": nm.weight(ckpt.get(PREFIX + "norm.weight", "BF16", [cfg.hidden])),
        "lm_head": nm.weight(ckpt.get(LM_HEAD, "BF16", [cfg.vocab, cfg.hidden])),
        "output_gw": nm.weight(ckpt.get(PREFIX + "output_attn_res_norm.weight", "BF16", [cfg.hidden]))
        * nm.weight(ckpt.get(PREFIX + "output_attn_res_proj.weight", "BF16", [1, cfg.hidden]))[0],
    }
    results = []
    for st in states:
        r = summarize(output_logprobs(nm, cfg, G, st), st.ids, top_k)
        T = len(st.ids)
        r["router"] = [[layer[t].tolist() for layer in st.router] for t in range(T)]
        r["router_weights"] = [[layer[t].tolist() for layer in st.router_weights] for t in range(T)]
        if record_hidden:
            r["hidden"] = torch.stack(st.hidden, dim=0)  # [layers, T, H]
        r["sum_sq"] = st.sum_sq
        results.append(r)
    return results


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model_dir")
    ap.add_argument("--ids", required=True, help="comma-separated token ids of one sequence")
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16", "fp64"])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--kda", default="step", choices=["step", "chunk"])
    ap.add_argument("--no-validate", action="store_true", help="skip the full tensor-list check")
    args = ap.parse_args(argv)
    ck = ckpt_mod.Checkpoint(args.model_dir)
    if not args.no_validate:
        ck.validate()
    ids = [int(t) for t in args.ids.split(",")]
    r = run(ck, [ids], args.precision, args.device, args.kda, log=lambda s: print(s, file=sys.stderr))[0]
    for t, tok in enumerate(ids):
        lp = "%.6f" % r["logprob"][t] if t < len(ids) - 1 else "-"
        print("t=%d id=%d next_logprob=%s entropy=%.4f top=%s" % (t, tok, lp, r["entropy"][t], r["topk_ids"][t][:4]))


if __name__ == "__main__":
    main()
