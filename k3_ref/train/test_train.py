#!/usr/bin/env python3
"""Self-tests of the trainer: the batched training forward is k3_ref's forward, and export round-trips.

    /usr/bin/python3 -m unittest discover -s k3_ref/train -v      # about 20 s on a CPU
"""

import os
import sys
import tempfile
import unittest

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, HERE)

import checkpoint as ckpt_mod  # noqa: E402
import k3_ref  # noqa: E402
import make_tiny_fixture  # noqa: E402
import export  # noqa: E402
import model  # noqa: E402
import mxfp4  # noqa: E402


class MXFP4(unittest.TestCase):
    def test_encode_decodes_to_fake_quant(self):
        w = torch.randn(16, 96, generator=torch.Generator().manual_seed(3)) * 0.05
        w[0, :32] = 0  # an all-zero group
        packed, scale = mxfp4.encode(w)
        self.assertTrue(torch.equal(ckpt_mod.decode_mxfp4(packed, scale), mxfp4.fake_quant(w)))

    def test_no_clipping(self):
        w = torch.randn(4, 64) * 3
        self.assertLessEqual(float((mxfp4.fake_quant(w) - w).abs().max()), float(w.abs().max()) / 6 + 1e-6)


class ForwardIsReference(unittest.TestCase):
    """A random state, exported, replayed by k3_ref.run: the trainer's quantised forward gives the same
    log-probabilities (the trainer trains the model the engine runs)."""

    def test_export_then_reference(self):
        with tempfile.TemporaryDirectory() as tmp:
            template = os.path.join(tmp, "template")
            make_tiny_fixture.write_checkpoint(template, seed=1)
            cfg, _ = ckpt_mod.load_config(template)
            params, buffers = model.init_params(cfg, torch.Generator().manual_seed(2))
            gen = torch.Generator().manual_seed(4)
            for name, t in params.items():  # move every tensor off its initial value
                if t.dim() >= 1:
                    params[name] = t + 0.05 * torch.randn(t.shape, generator=gen)
            for name in buffers:
                buffers[name] = 0.1 * torch.randn(buffers[name].shape, generator=gen)
            torch.save({"params": params, "buffers": buffers}, os.path.join(tmp, "state.pt"))
            out = os.path.join(tmp, "out")
            export.export(template, os.path.join(tmp, "state.pt"), out)
            ck = ckpt_mod.Checkpoint(out)
            ck.validate()
            ids = [[5, 17, 300, 2, 99, 140, 7, 7, 260, 31, 44, 1] * 6, [3, 1, 4, 1, 5, 9, 2, 6] * 9]
            ref = k3_ref.run(ck, ids, "fp32")
            W = model.Weights(params, buffers, qat=True)
            for seq, r in zip(ids, ref):
                x = torch.tensor([seq])
                logits, _, _ = model.forward(cfg, W, x)
                lp = torch.log_softmax(logits[0], -1)
                got = lp[torch.arange(len(seq) - 1), x[0, 1:]]
                want = torch.tensor(r["logprob"], dtype=torch.float32)
                self.assertGreater(float(want.std()), 0.1)  # not a flat distribution
                self.assertLess(float((got - want).abs().max()), 2e-4, "max |delta logprob|")


if __name__ == "__main__":
    unittest.main()
