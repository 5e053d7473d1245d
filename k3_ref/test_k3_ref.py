"""Self-tests of k3_ref. Run from the repository root:

    /usr/bin/python3 -m unittest discover -s k3_ref -v
"""

import json
import math
import os
import struct
import subprocess
import sys
import tempfile
import unittest

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import importlib  # noqa: E402

import checkpoint  # noqa: E402
import make_tiny_fixture  # noqa: E402
import safetensors_io  # noqa: E402

# Run as k3_ref.test_k3_ref (python3 -m unittest k3_ref.test_k3_ref), the name k3_ref is this directory, not
# k3_ref.py: import the module through the package then.
k3_ref = importlib.import_module(__package__ + ".k3_ref" if __package__ else "k3_ref")
Numerics = k3_ref.Numerics

FP32 = Numerics("fp32")
BF16 = Numerics("bf16")


def k3_text_config():
    """The K3 text_config values of spec section 1."""
    full = list(range(4, 93, 4)) + [93]
    return {
        "model_type": "kimi_linear", "hidden_size": 7168, "num_hidden_layers": 93, "vocab_size": 163840,
        "rms_norm_eps": 1e-5, "num_attention_heads": 96, "num_key_value_heads": 96, "q_lora_rank": 1536,
        "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
        "mla_use_nope": True, "mla_use_output_gate": True,
        "linear_attn_config": {"head_dim": 128, "num_heads": 96, "short_conv_kernel_size": 4,
                               "use_full_rank_gate": True, "gate_lower_bound": -5.0,
                               "kda_layers": [i for i in range(1, 94) if i not in full], "full_attn_layers": full},
        "intermediate_size": 33792, "first_k_dense_replace": 1, "moe_layer_freq": 1, "num_experts": 896,
        "num_experts_per_token": 16, "num_shared_experts": 2, "moe_intermediate_size": 3072,
        "routed_expert_hidden_size": 3584, "latent_moe_use_norm": True, "moe_router_activation_func": "sigmoid",
        "moe_renormalize": True, "routed_scaling_factor": 1.0, "topk_method": "noaux_tc", "num_expert_group": 1,
        "topk_group": 1, "hidden_act": "situ", "activation_situ_beta": 4.0, "activation_situ_linear_beta": 25.0,
        "attn_res_block_size": 12, "tie_word_embeddings": False, "num_nextn_predict_layers": 0,
    }


def read_json(path):
    with open(path) as f:
        return json.load(f)


def write_json(path, doc):
    with open(path, "w") as f:
        json.dump(doc, f)


def bf16_round(x):
    return torch.as_tensor(x, dtype=torch.float32).to(torch.bfloat16).to(torch.float32)


# ----------------------------------------------------------------------------------------------------------


class TestConfigAndSpecs(unittest.TestCase):
    def test_k3_layer_plan(self):
        c = checkpoint.Config({"model_type": "kimi_k3", "text_config": k3_text_config()})
        self.assertEqual(c.mla_layers, list(range(3, 92, 4)) + [92])
        self.assertEqual(c.mla_layers[-2:], [91, 92])
        self.assertEqual(len(c.mla_layers), 24)
        self.assertEqual(sum(1 for i in range(93) if not c.is_mla(i)), 69)
        self.assertFalse(c.is_moe(0))
        self.assertTrue(all(c.is_moe(i) for i in range(1, 93)))

    def test_k3_tensor_counts_close(self):
        # spec section 2: 23 (layer 0), 5404 (KDA+MoE), 5398 (MLA+MoE), 5 globals, 168 vision = 497,220
        c = checkpoint.Config({"model_type": "kimi_k3", "text_config": k3_text_config()})
        self.assertEqual(len(checkpoint.global_specs(c)), 5)
        self.assertEqual(len(checkpoint.layer_specs(c, 0)), 23)
        self.assertEqual(len(checkpoint.layer_specs(c, 1)), 5404)
        self.assertEqual(len(checkpoint.layer_specs(c, 3)), 5398)
        self.assertEqual(len(checkpoint.all_specs(c)) + 168, 497220)
        expert_bytes = sum(int(np.prod(s)) for _, _, s in checkpoint.expert_specs(c, 1, 0))
        self.assertEqual(expert_bytes, 17547264)
        names = dict((n, (d, s)) for n, d, s in checkpoint.layer_specs(c, 1))
        p = checkpoint.PREFIX + "layers.1.block_sparse_moe.experts.0."
        self.assertEqual(names[p + "w1.weight_packed"], ("U8", [3072, 1792]))
        self.assertEqual(names[p + "w1.weight_scale"], ("U8", [3072, 112]))
        self.assertEqual(names[p + "w2.weight_packed"], ("U8", [3584, 1536]))
        self.assertEqual(names[p + "w2.weight_scale"], ("U8", [3584, 96]))
        self.assertEqual(names[checkpoint.PREFIX + "layers.1.self_attn.A_log"], ("F32", [128]))

    def test_refuses_kimi_linear_top_level(self):
        with self.assertRaises(checkpoint.CheckpointError):
            checkpoint.Config({"model_type": "kimi_linear", "text_config": k3_text_config()})


class TestMXFP4(unittest.TestCase):
    GOLDEN = checkpoint.GOLDEN_ROW  # spec section 4; see checkpoint.py for how the codes and scale follow
    CODES = checkpoint.GOLDEN_ROW_CODES
    SCALE = checkpoint.GOLDEN_ROW_SCALE

    def pack(self, codes):
        return torch.tensor([[codes[2 * j] | (codes[2 * j + 1] << 4) for j in range(len(codes) // 2)]],
                            dtype=torch.uint8)

    def test_public_golden_row(self):
        codes = self.CODES + [0] * 16  # one group of 32 columns; the rest of the group is zero
        out = checkpoint.decode_mxfp4(self.pack(codes), torch.tensor([[self.SCALE]], dtype=torch.uint8))
        got = out[0, :16].tolist()
        self.assertEqual(got, self.GOLDEN)
        self.assertTrue(math.copysign(1.0, got[9]) < 0, "code 8 must decode to -0.0")

    def test_nibble_order_and_groups(self):
        # byte 0x21: column 0 = low nibble (code 1 = 0.5), column 1 = high nibble (code 2 = 1.0)
        packed = torch.tensor([[0x21] + [0] * 15 + [0x7F] + [0] * 15], dtype=torch.uint8)  # 64 columns
        scale = torch.tensor([[127, 130]], dtype=torch.uint8)  # group 0 x1, group 1 x8
        out = checkpoint.decode_mxfp4(packed, scale)[0]
        self.assertEqual(out[:2].tolist(), [0.5, 1.0])
        self.assertEqual(out[32:34].tolist(), [-6.0 * 8, 6.0 * 8])  # 0x7F: low 0xF = -6, high 0x7 = 6

    def test_all_codes_match_numpy(self):
        rng = np.random.default_rng(0)
        codes = rng.integers(0, 16, size=(5, 64))
        scales = rng.integers(100, 140, size=(5, 2))
        lut = np.array([0, .5, 1, 1.5, 2, 3, 4, 6, -0., -.5, -1, -1.5, -2, -3, -4, -6])
        want = lut[codes] * np.exp2(np.repeat(scales, 32, axis=1) - 127.0)
        packed = torch.tensor(codes[:, 0::2] | (codes[:, 1::2] << 4), dtype=torch.uint8)
        got = checkpoint.decode_mxfp4(packed, torch.tensor(scales, dtype=torch.uint8)).numpy()
        np.testing.assert_array_equal(got, want.astype(np.float32))

    def test_refuses_nan_scale(self):
        with self.assertRaises(checkpoint.CheckpointError):
            checkpoint.decode_mxfp4(torch.zeros(1, 16, dtype=torch.uint8), torch.tensor([[255]], dtype=torch.uint8))


class TestSmallOps(unittest.TestCase):
    def test_situ_values(self):
        def ref(a, b):  # spec 5.4, written with the math module
            return 4 * math.tanh(a / 4) / (1 + math.exp(-a)) * 25 * math.tanh(b / 25)
        for a, b in [(0.0, 3.0), (1.0, 2.0), (-2.5, 0.7), (10.0, -40.0), (100.0, 1000.0), (-30.0, 5.0)]:
            got = k3_ref.situ(torch.tensor(a, dtype=torch.float64), torch.tensor(b, dtype=torch.float64), 4.0, 25.0)
            self.assertAlmostEqual(got.item(), ref(a, b), places=12)
        # saturation: gate -> 4 * tanh(a/4) ~ 4, linear part -> 25; and it is not SwiGLU
        self.assertAlmostEqual(k3_ref.situ(torch.tensor(100.0), torch.tensor(1e4), 4.0, 25.0).item(), 100.0, places=3)
        a, b = torch.tensor(1.0), torch.tensor(2.0)
        self.assertGreater(abs(k3_ref.situ(a, b, 4.0, 25.0) - torch.nn.functional.silu(a) * b).item(), 1e-3)

    def test_rms_norm_fp32(self):
        x = torch.tensor([[1.0, 2.0, 3.0, 4.0]])
        w = torch.tensor([1.0, 0.5, 2.0, -1.0])
        want = [xi * wi / math.sqrt(7.5 + 1e-5) for xi, wi in zip([1, 2, 3, 4], w.tolist())]
        got = k3_ref.rms_norm(FP32, x, w, 1e-5)[0].tolist()
        for g, e in zip(got, want):
            self.assertAlmostEqual(g, e, places=6)

    def test_rms_norm_bf16_rounding_points(self):
        torch.manual_seed(1)
        x = bf16_round(torch.randn(3, 64) * 3)
        w = bf16_round(1 + 0.1 * torch.randn(64))
        got = k3_ref.rms_norm(BF16, x, w, 1e-5)
        # contract (b), written out element by element
        for r in range(3):
            mean = float((x[r].double() ** 2).sum() / 64)
            inv = 1.0 / math.sqrt(mean + 1e-5)
            for d in range(64):
                n = bf16_round(torch.tensor(x[r, d].item() * inv, dtype=torch.float32))
                want = bf16_round(n * w[d])
                self.assertEqual(got[r, d].item(), want.item(), "row %d col %d" % (r, d))

    def test_short_conv_taps(self):
        x = torch.arange(1.0, 7.0)[:, None]  # [T=6, C=1]
        w = torch.zeros(1, 1, 4)
        w[0, 0, 3] = 1.0  # tap 3 multiplies the current token
        self.assertTrue(torch.allclose(k3_ref.short_conv_silu(x, w), torch.nn.functional.silu(x)))
        w = torch.zeros(1, 1, 4)
        w[0, 0, 0] = 1.0  # tap 0 multiplies the token 3 back, zero before the start
        want = torch.nn.functional.silu(torch.tensor([0, 0, 0, 1.0, 2.0, 3.0]))[:, None]
        self.assertTrue(torch.allclose(k3_ref.short_conv_silu(x, w), want))

    def test_kda_gate_range(self):
        graw = torch.linspace(-4, 4, 40, dtype=torch.float64).view(5, 2, 4)
        g = k3_ref.kda_gate(graw, torch.tensor([0.0, 1.0], dtype=torch.float64), torch.zeros(2, 4, dtype=torch.float64),
                            -5.0)
        self.assertTrue(bool(((g > -5) & (g < 0)).all()))  # open interval (fp32 saturates at the ends)
        g0 = k3_ref.kda_gate(torch.zeros(1, 1, 1), torch.tensor([0.0]), torch.zeros(1, 1), -5.0)
        self.assertAlmostEqual(g0.item(), -2.5, places=6)  # -5 * sigma(0)

    def test_attn_res_mix(self):
        v = torch.randn(4, 8, generator=torch.Generator().manual_seed(0))
        out, p = k3_ref.attn_res_mix(FP32, [v], torch.randn(8))
        self.assertTrue(torch.equal(out, v))  # one vector: weight 1
        out, p = k3_ref.attn_res_mix(FP32, [v, 2 * v, -v], torch.zeros(8))  # equal scores: the mean
        self.assertTrue(torch.allclose(out, (v + 2 * v - v) / 3, atol=1e-6))
        # scale invariance of the scores: v and 3v (rms-normalised) get equal weight
        gw = torch.randn(8)
        _, p = k3_ref.attn_res_mix(FP32, [v, 3 * v], gw)
        self.assertTrue(torch.allclose(p[0], p[1], atol=1e-4))  # up to the 1e-5 eps


class TestRouter(unittest.TestCase):
    class Cfg:
        top_k = 3
        renormalize = True
        routed_scale = 1.0

    def test_rank_desc_ties_lower_index_first(self):
        s = torch.tensor([[0.1, 0.9, 0.5, 0.9, 0.5, 0.9]])
        self.assertEqual(k3_ref.rank_desc(s)[0].tolist(), [1, 3, 5, 2, 4, 0])

    def test_route_ties_and_weights(self):
        # all router logits 0 -> s = 0.5 everywhere; the bias makes experts 6 and 2 tie at the top, then 4 and 7
        x = torch.zeros(2, 4)
        w = torch.zeros(8, 4)
        bias = torch.tensor([0.0, 0.0, 1.0, 0.0, 0.5, 0.0, 1.0, 0.5])
        chosen, weights = k3_ref.route(self.Cfg, x, w, bias)
        self.assertEqual(chosen.tolist(), [[2, 6, 4], [2, 6, 4]])
        self.assertTrue(torch.allclose(weights, torch.full((2, 3), 1 / 3)))  # bias only selects
        # large sample of ties: ids always ascending among equals
        x = torch.zeros(1, 4)
        chosen, _ = k3_ref.route(self.Cfg, x, w, torch.zeros(8))
        self.assertEqual(chosen.tolist(), [[0, 1, 2]])


class TestKDA(unittest.TestCase):
    def random_inputs(self, T, nh, dk, dv, dtype, seed):
        g = torch.Generator().manual_seed(seed)
        q = k3_ref.l2_normalize(torch.randn(T, nh, dk, generator=g, dtype=dtype)) * dk ** -0.5
        k = k3_ref.l2_normalize(torch.randn(T, nh, dk, generator=g, dtype=dtype))
        v = torch.randn(T, nh, dv, generator=g, dtype=dtype)
        graw = torch.randn(T, nh, dk, generator=g, dtype=dtype) * 2
        gate = k3_ref.kda_gate(graw, torch.rand(nh, generator=g, dtype=dtype) * 2, torch.zeros(nh, dk, dtype=dtype),
                               -5.0)
        beta = torch.sigmoid(torch.randn(T, nh, generator=g, dtype=dtype))
        return q, k, v, gate, beta

    def test_chunked_equals_recurrent_fp32(self):
        for T in (1, 63, 64, 65, 129, 200):
            for nh in (1, 4):
                with self.subTest(T=T, nh=nh):
                    q, k, v, g, beta = self.random_inputs(T, nh, 32, 24, torch.float32, seed=T * 10 + nh)
                    o1, s1 = k3_ref.kda_recurrent(q, k, v, g, beta)
                    o2, s2 = k3_ref.kda_chunked(q, k, v, g, beta, chunk=64)
                    self.assertLess((o1 - o2).abs().max().item(), 1e-5)
                    self.assertLess((s1 - s2).abs().max().item(), 1e-5)

    def test_chunked_equals_recurrent_fp64_with_state(self):
        q, k, v, g, beta = self.random_inputs(150, 2, 16, 16, torch.float64, seed=7)
        S0 = torch.randn(2, 16, 16, dtype=torch.float64)
        o1, s1 = k3_ref.kda_recurrent(q, k, v, g, beta, S0)
        o2, s2 = k3_ref.kda_chunked(q, k, v, g, beta, chunk=16, S0=S0)
        self.assertLess((o1 - o2).abs().max().item(), 1e-12)
        self.assertLess((s1 - s2).abs().max().item(), 1e-12)

    def test_recurrent_first_step_by_hand(self):
        # one token, S = 0: u = beta v, S = k u^T, o = S^T q = beta (k.q) v
        q, k, v, g, beta = self.random_inputs(1, 1, 8, 8, torch.float64, seed=3)
        o, S = k3_ref.kda_recurrent(q, k, v, g, beta)
        want = beta[0, 0] * (k[0, 0] @ q[0, 0]) * v[0, 0]
        self.assertTrue(torch.allclose(o[0, 0], want))


class TestMLA(unittest.TestCase):
    def test_masked_equals_rows(self):
        g = torch.Generator().manual_seed(0)
        for T in (1, 7, 65):
            q = torch.randn(T, 3, 24, generator=g)
            k = torch.randn(T, 3, 24, generator=g)
            v = torch.randn(T, 3, 16, generator=g)
            a = k3_ref.causal_softmax_attention(q, k, v, 24 ** -0.5)
            b = k3_ref.causal_softmax_attention_rows(q, k, v, 24 ** -0.5)
            self.assertLess((a - b).abs().max().item(), 1e-6)
            self.assertTrue(torch.allclose(a[0], v[0]))  # the first token attends only to itself


class TestSafetensors(unittest.TestCase):
    def test_roundtrip_and_overrun(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "x.safetensors")
            ts = {"a": torch.randn(3, 5).to(torch.bfloat16), "b": torch.randn(7),
                  "c": torch.arange(10, dtype=torch.uint8)}
            safetensors_io.write_shard(path, ts)
            for prefer in (True, False):
                f = safetensors_io.open_shard(path, prefer_package=prefer)
                for n, t in ts.items():
                    self.assertTrue(torch.equal(f.get(n), t), n)
                    self.assertEqual(f.get(n).dtype, t.dtype)
            with open(path, "r+b") as f:  # claim a header longer than the file
                f.write(struct.pack("<Q", 10 ** 9))
            with self.assertRaises(safetensors_io.SafetensorsError):
                safetensors_io.read_header(path)


# ----------------------------------------------------------------------------------------------------------
# End to end on the tiny fixture


class TestEndToEnd(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.dir = os.path.join(cls.tmp.name, "tiny")
        make_tiny_fixture.write_checkpoint(cls.dir, seed=0)
        cls.ck = checkpoint.Checkpoint(cls.dir)
        cls.ck.validate()
        rng = np.random.default_rng(5)
        cls.seqs = [[int(t) for t in rng.integers(0, 512, size=n)] for n in (1, 9, 70)]
        cls.res = {p: k3_ref.run(cls.ck, cls.seqs, p, record_hidden=True) for p in ("fp32", "bf16", "fp64")}

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_finite_and_normalised(self):
        for p, rs in self.res.items():
            for ids, r in zip(self.seqs, rs):
                T = len(ids)
                self.assertEqual(len(r["logprob"]), T - 1)
                self.assertEqual(len(r["entropy"]), T)
                self.assertTrue(all(math.isfinite(x) for x in r["logprob"] + r["entropy"]), p)
                tol = 1e-5 if p != "bf16" else 1e-4
                self.assertTrue(all(abs(s - 1) < tol for s in r["sum_prob"]), (p, r["sum_prob"][:3]))
                for lps, ids_k in zip(r["topk_logprobs"], r["topk_ids"]):
                    self.assertEqual(lps, sorted(lps, reverse=True))
                    self.assertEqual(len(set(ids_k)), 8)
                self.assertEqual(len(r["router"]), T)
                for pos, wpos in zip(r["router"], r["router_weights"]):
                    self.assertEqual(len(pos), 5)  # MoE layers 1..5
                    for ch, ws in zip(pos, wpos):
                        self.assertEqual(len(set(ch)), 2)
                        self.assertAlmostEqual(sum(ws), 1.0, places=5)  # renormalised, scaling 1.0

    def test_fp32_matches_fp64(self):
        for a, b in zip(self.res["fp32"], self.res["fp64"]):
            d = max([abs(x - y) for x, y in zip(a["logprob"], b["logprob"])] + [0])
            self.assertLess(d, 1e-4)
            for L in range(a["hidden"].shape[0]):
                rel = ((a["hidden"][L] - b["hidden"][L]).norm() / b["hidden"][L].norm()).item()
                self.assertLess(rel, 1e-5, "layer %d" % L)

    def test_kda_chunk_forward_matches_step(self):
        r = k3_ref.run(self.ck, self.seqs[2:], "fp32", kda_impl="chunk", record_hidden=True)[0]
        a = self.res["fp32"][2]
        rel = ((a["hidden"] - r["hidden"]).norm() / a["hidden"].norm()).item()
        self.assertLess(rel, 1e-5)

    def test_sequence_independence(self):
        alone = k3_ref.run(self.ck, [self.seqs[1]], "bf16")[0]
        together = self.res["bf16"][1]
        self.assertEqual(alone["logprob"], together["logprob"])
        self.assertEqual(alone["router"], together["router"])

    def test_bf16_values_are_bf16(self):
        h = self.res["bf16"][2]["hidden"]
        self.assertTrue(torch.equal(h, bf16_round(h)))

    def test_validation_names_the_tensor(self):
        with tempfile.TemporaryDirectory() as d:
            make_tiny_fixture.write_checkpoint(d, seed=1, n_shards=2)
            idx_path = os.path.join(d, "model.safetensors.index.json")
            idx = read_json(idx_path)
            name = checkpoint.PREFIX + "layers.2.self_attn.dt_bias"
            del idx["weight_map"][name]
            idx["weight_map"]["language_model.model.layers.2.extra.weight"] = idx["weight_map"][
                checkpoint.PREFIX + "norm.weight"]
            write_json(idx_path, idx)
            with self.assertRaises(checkpoint.CheckpointError) as cm:
                ck = checkpoint.Checkpoint(d)
                ck.validate()
            self.assertIn(name, str(cm.exception))
            self.assertIn("missing", str(cm.exception))
            idx["weight_map"][name] = "model-00009-of-00009.safetensors"
            write_json(idx_path, idx)
            with self.assertRaises(checkpoint.CheckpointError) as cm:
                checkpoint.Checkpoint(d)
            self.assertIn("model-00009-of-00009.safetensors", str(cm.exception))

    def test_write_goldens_and_compare(self):
        with tempfile.TemporaryDirectory() as d:
            inp = os.path.join(d, "in.json")
            write_json(inp, {"sequences": self.seqs})
            out = os.path.join(d, "gold")
            subprocess.run([sys.executable, os.path.join(HERE, "write_goldens.py"), self.dir, inp, out, "--quiet"],
                           check=True, capture_output=True)
            g = read_json(os.path.join(out, "golden-fp32.json"))
            self.assertEqual(g["precision"], "fp32")
            self.assertEqual(g["top_k"], 8)
            n_tok = sum(map(len, self.seqs))
            self.assertEqual(g["hidden_shape"], [6, n_tok, 64])
            hidden = np.fromfile(os.path.join(out, "hidden-fp32.f32"), dtype="<f4").reshape(g["hidden_shape"])
            want = torch.cat([r["hidden"] for r in self.res["fp32"]], dim=1).numpy()
            np.testing.assert_array_equal(hidden, want)
            rms = np.sqrt((hidden.astype(np.float64) ** 2).mean(axis=(1, 2)))
            np.testing.assert_allclose(g["layer_rms"], rms, rtol=1e-6)
            self.assertEqual(g["sequences"][2]["logprob"], self.res["fp32"][2]["logprob"])
            b = read_json(os.path.join(out, "golden-bf16.json"))
            self.assertNotIn("hidden_shape", b)
            rep = subprocess.run([sys.executable, os.path.join(HERE, "compare.py"), out], check=True,
                                 capture_output=True, text=True).stdout
            self.assertIn("top1_agreement", rep)


if __name__ == "__main__":
    unittest.main()
