"""The fixed arithmetic of the texture, as the reference (kornia) computes it: sRGB to linear to LAB,
grayscale and the normalised Sobel at the bilinear taps, the kernels that read each cell's 4 x 4
window, and the bilinear resize's taps evaluated only where the grid samples (model.PhotoWindows).
"""
from __future__ import annotations

import torch

from arrcoc_edge.relevance.signature import CELL  # noqa: F401 - the texture's pixels per cell

# The colour maths below is written in ops that XNNPACK (ExecuTorch) delegates: it takes exp, log,
# sub, mul and clamp, but no pow with a non-integer exponent and no comparison or `where`, which
# ran on ExecuTorch's portable kernels (side by side at G=32, D=2048: batch 1 1.54 -> 1.36 ms,
# batch 8 8.52 -> 7.65 ms). Both rewrites are
# exact in real arithmetic and change float32 results by rounding only (tests/test_reference.py):
#   x ** p = exp(p * log x) for x > 0 (each branch clamps its input to its own domain, so log never
#   sees 0 even where the branch is not taken), and
#   where(x > t, a, b) = m * a + (1 - m) * b with m exactly 1.0 or 0.0 (see _step): 1 * a + 0 * b
#   is a itself, because both branches are finite.
_STEP_SCALE = 2.0**100  # a power of two: multiplying by it is exact until it overflows to inf


def _step(x: torch.Tensor, threshold: float) -> torch.Tensor:
    """Exactly 1.0 where x > threshold, exactly 0.0 elsewhere, in float ops XNNPACK takes.

    x - threshold is exact near the threshold (Sterbenz) and at least 2**-30 when positive (the
    thresholds here are above 2**-7), so the scaled difference is >= 2**70 and clamps to 1; zero
    or negative clamps to 0."""
    return ((x - threshold) * _STEP_SCALE).clamp(0.0, 1.0)


def _srgb_to_linear(c: torch.Tensor) -> torch.Tensor:
    """kornia's sRGB -> linear RGB: ((c + 0.055) / 1.055) ** 2.4 above 0.04045, c / 12.92 below."""
    high = torch.exp(2.4 * torch.log((c.clamp(min=0.04045) + 0.055) / 1.055))
    m = _step(c, 0.04045)
    return m * high + (1.0 - m) * (c / 12.92)


def _lab_f(t: torch.Tensor) -> torch.Tensor:
    """CIE f(t): the cube root above 0.008856, 7.787 t + 4/29 below."""
    high = torch.exp(torch.log(t.clamp(min=0.008856)) * (1.0 / 3.0))
    m = _step(t, 0.008856)
    return m * high + (1.0 - m) * (7.787 * t + 4.0 / 29.0)


# Rows of kornia's sRGB->XYZ matrix for X and Y, X divided by the D65 white point (Y's is 1).
_XY_FROM_LINEAR_RGB = torch.tensor([[0.412453, 0.357580, 0.180423], [0.212671, 0.715160, 0.072169]])
_XY_FROM_LINEAR_RGB[0] /= 0.95047
_GRAY = (0.299, 0.587, 0.114)  # kornia.color.rgb_to_grayscale
_SOBEL_X = torch.tensor([[-1.0, 0.0, 1.0], [-2.0, 0.0, 2.0], [-1.0, 0.0, 1.0]]) / 8.0  # kornia, normalised

# Offsets inside a CELL-pixel block: the bilinear 16x downsample reads pixels 7 and 8 of each
# block (weight 1/2 each); a 3x3 Sobel at those pixels reads 6..9: the cell's 4 x 4 window.
_WINDOW = (6, 10)
_TAPS = ((1, 1), (1, 2), (2, 1), (2, 2))  # the bilinear taps, as (row, column) inside the window

# Output channels of the window convolution (each a linear function of the cell's 4 x 4 window):
_GX_TAPS, _GY_TAPS = slice(0, 4), slice(4, 8)  # Sobel x / y of the grayscale image at each tap
_G_MEANS = slice(8, 10)  # Sobel x and y sampled (mean over the taps)
_RGB_MEANS = slice(10, 13)  # R, G, B sampled
_TAP_VALUES = slice(13, 25)  # the raw pixel values, channel 13 + 3 * tap + colour
_WINDOW_OUTPUTS = 25


def _window_kernel() -> torch.Tensor:
    """[25,3,4,4]: one strided convolution computes every linear texture quantity of a cell.

    Applied with stride 4 to the cells' windows (PhotoWindows), it reads exactly each cell's window. The grayscale weights are folded into the Sobel kernels (Sobel is linear, so
    Sobel(gray) = sum_c w_c Sobel(c)); a raw tap value is a one-hot kernel, exact in float (the
    other products are exact zeros).
    """
    gray = torch.tensor(_GRAY)[:, None, None]
    k = torch.zeros(_WINDOW_OUTPUTS, 3, 4, 4)
    for t, (r, c) in enumerate(_TAPS):
        k[_GX_TAPS.start + t, :, r - 1 : r + 2, c - 1 : c + 2] = gray * _SOBEL_X
        k[_GY_TAPS.start + t, :, r - 1 : r + 2, c - 1 : c + 2] = gray * _SOBEL_X.t()
        for colour in range(3):
            k[_RGB_MEANS.start + colour, colour, r, c] = 0.25
            k[_TAP_VALUES.start + 3 * t + colour, colour, r, c] = 1.0
    k[_G_MEANS.start] = k[_GX_TAPS].mean(dim=0)
    k[_G_MEANS.start + 1] = k[_GY_TAPS].mean(dim=0)
    return k


def _colour_kernels() -> dict[str, torch.Tensor]:
    """1x1 convolutions over the 12 tap values (channel 3 * tap + colour), so no op slices or
    splits colour channels (TensorRT rejects the SplitToSequence a split exports to):
    xy [8,12]: X/Xn and Y at each tap from linear RGB (kornia's sRGB->XYZ rows, D65);
    lab [2,8] + lab_bias: (L*/100, (a*+128)/255) sampled, i.e. the mean over the taps of
    L* = 116 f(Y) - 16 and a* = 500 (f(X) - f(Y)), both affine in f, folded into one map;
    pairs [4,8] + mag_eps: gx^2 + gy^2 + 1e-8 at each tap."""
    xy, lab, pairs = torch.zeros(8, 12, 1, 1), torch.zeros(2, 8, 1, 1), torch.zeros(4, 8, 1, 1)
    for t in range(4):
        xy[t, 3 * t : 3 * t + 3, 0, 0] = _XY_FROM_LINEAR_RGB[0]
        xy[4 + t, 3 * t : 3 * t + 3, 0, 0] = _XY_FROM_LINEAR_RGB[1]
        pairs[t, t] = pairs[t, 4 + t] = 1.0
    lab[0, 4:8] = 116.0 / 100.0 / 4
    lab[1, 0:4] = 500.0 / 255.0 / 4
    lab[1, 4:8] = -500.0 / 255.0 / 4
    return {"xy": xy, "lab": lab, "lab_bias": torch.tensor([-16.0 / 100.0, 128.0 / 255.0]),
            "pairs": pairs, "mag_eps": torch.full((4,), 1e-8)}


def _window_offsets(grid: int) -> torch.Tensor:
    """The 4G rows (or columns) of the 16G-pixel resized image that the texture reads: 16i+6..16i+9."""
    lo, hi = _WINDOW
    cells = torch.arange(grid, dtype=torch.float32)[:, None] * CELL
    return (cells + torch.arange(lo, hi, dtype=torch.float32)[None, :]).flatten()


def resize_taps(dst: torch.Tensor, n: torch.Tensor, out_size: int):
    """Where PyTorch's bilinear resize (align_corners=False, no antialias) of an axis of n pixels
    to out_size reads for the output pixels `dst`: (lower index, upper index, upper weight).

    Float32 throughout, in PyTorch's own order (aten/src/ATen/native/UpSample.h): scale = n / out,
    src = max(scale * (dst + 0.5) - 0.5, 0), i0 = min(floor(src), n - 1), w1 = clamp(src - i0, 0, 1),
    i1 = i0 + 1 unless i0 is the last pixel. n is a 0-d float32 tensor (the axis length), so the
    graph computes the same numbers for every photo size.
    """
    scale = n / out_size
    src = ((dst + 0.5) * scale - 0.5).clamp(min=0.0)
    last = n - 1.0
    i0 = torch.minimum(src.floor(), last)
    w1 = (src - i0).clamp(0.0, 1.0)
    i1 = torch.minimum(i0 + 1.0, last)
    return i0.long(), i1.long(), w1


