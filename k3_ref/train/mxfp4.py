"""MXFP4 encoding (spec 4) for the demo model's routed experts: the inverse of checkpoint.decode_mxfp4.

Each group of 32 columns of a row gets the E8M0 scale 2^s with s = ceil(log2(amax / 6)) (the largest
magnitude maps to at most 6, the largest E2M1 value, so nothing clips), and each value the nearest E2M1
code of x / 2^s (ties to the lower magnitude). encode followed by checkpoint.decode_mxfp4 returns
fake_quant's values exactly (a test says so).
"""

import torch

E2M1_POS = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])
GROUP = 32


def _scale_exp(w):
    """s per group: w [..., n] -> [..., n/32] int (clamped to E8M0's range without NaN, -127..127)."""
    g = w.reshape(*w.shape[:-1], w.shape[-1] // GROUP, GROUP)
    amax = g.abs().amax(dim=-1)
    s = torch.ceil(torch.log2(torch.clamp(amax, min=2.0 ** -127) / 6.0))
    return torch.clamp(s, -127, 127)


def _codes(w, s):
    """Magnitude index (0..7) and sign of each value of w [..., n] at group exponents s."""
    g = w.reshape(*w.shape[:-1], w.shape[-1] // GROUP, GROUP) / torch.pow(2.0, s)[..., None]
    dist = (g.abs()[..., None] - E2M1_POS.to(w.device)).abs()
    idx = torch.argmin(dist, dim=-1)  # the first (lower magnitude) among equals
    return idx.reshape(w.shape), (w < 0)


def fake_quant(w):
    """w [..., n] -> the float32 values its MXFP4 encoding decodes to."""
    s = _scale_exp(w)
    idx, neg = _codes(w, s)
    mag = E2M1_POS.to(w.device)[idx].reshape(*w.shape[:-1], w.shape[-1] // GROUP, GROUP) * torch.pow(2.0, s)[..., None]
    mag = mag.reshape(w.shape)
    return torch.where(neg, -mag, mag)


def encode(w):
    """w [rows, n] float -> (weight_packed U8 [rows, n/2], weight_scale U8 [rows, n/32]) as uint8 tensors."""
    w = w.detach().float()
    s = _scale_exp(w)
    idx, neg = _codes(w, s)
    codes = (idx + 8 * neg.long()).to(torch.uint8)
    packed = codes[:, 0::2] | (codes[:, 1::2] << 4)
    return packed.contiguous(), (s + 127).to(torch.uint8).contiguous()
