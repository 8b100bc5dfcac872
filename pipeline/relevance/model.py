"""The ARR-COC v0.1 relevance realizer, written afresh for export.

It computes what the reference computes (arr-coc-0-1, ARR_COC/{texture,knowing,balancing,
attending}.py, with kornia), held to it by `pipeline/relevance/reference.py` and tests/test_reference.py.
The one accepted difference: min-max normalisation is per sample, never across the batch, so one
image's result does not depend on its batch-mates (at batch 1 the two are identical).

How it gets there faster without changing the numbers (see PhotoWindows and TextureArray): the
reference stretches the photo to 16*G with a bilinear resize (align_corners=False, no antialias,
no crop), computes LAB, grayscale and a normalised 3x3 Sobel at every pixel, then samples the
G x G grid bilinearly (align_corners=False). A 16x bilinear downsample reads only pixels 16i+7
and 16i+8 of each axis, weight 1/2 each, so every texture channel needs just the 4 x 4 window
16i+6..16i+9 of each cell: the resize is evaluated at those 4G rows and 4G columns only (two taps
per axis, indices and weights computed from H and W the way PyTorch computes them), and the
colour maths runs on 4 taps per cell. No full-resolution image is ever made, no kornia in the graph.

Contract: image uint8 [B,H,W,3], the photo as decoded (RGB, rows top to bottom, EXIF orientation
applied, alpha dropped), 16 <= H, W <= 8192, one size per batch; query float32 [B,D] ->
relevance [B,G*G] in [0,1], topk_indices int64 [B,K], weights [B,3]
(information, perspectival, participatory).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from arrcoc_edge.relevance.signature import (  # noqa: F401 - re-exported: the model's names
    INPUT_NAMES,
    MAX_GRID,
    MAX_SIDE,
    MIN_SIDE,
    EVIDENCE_NAMES,
    OUTPUT_NAMES,
    WAYS_OF_KNOWING,
    ModelConfig,
    strongest_cells,
)
from arrcoc_edge.relevance.texture_maths import (
    _G_MEANS,
    _GX_TAPS,
    _GY_TAPS,
    _RGB_MEANS,
    _TAP_VALUES,
    CELL,
    _colour_kernels,
    _lab_f,
    _srgb_to_linear,
    _window_kernel,
    _window_offsets,
    resize_taps,
)

TEXTURE_CHANNELS = 13
CH_SOBEL_MAG = 7
# Normalisation epsilon as in the reference; keeps flat maps finite.
_MINMAX_EPS = 1e-8


def minmax_per_sample(x: torch.Tensor) -> torch.Tensor:
    """Scale each sample of x [B, ...] to [0, 1] independently of the rest of the batch."""
    dims = tuple(range(1, x.dim()))
    lo = x.amin(dim=dims, keepdim=True)
    hi = x.amax(dim=dims, keepdim=True)
    return (x - lo) / (hi - lo + _MINMAX_EPS)


class PhotoWindows(nn.Module):
    """The photo as decoded, uint8 [B,H,W,3] -> float [B,3,4G,4G]: every cell's 4 x 4 window of
    the reference's resize to 16G x 16G (ToTensor's /255, then the bilinear resize), exactly up
    to float rounding (~1e-7), and bit for bit at H = W = 16G (the taps are then the pixels
    themselves, with weight 0 on the second).

    One element gather reads the 8G x 8G source bytes the windows need (two taps per axis),
    still as uint8; the blend runs in float32 in PyTorch's order (columns, then rows) and the
    division by 255 comes last, on the 16x fewer blended values (x / 255 commutes with the
    blend up to rounding, and exactly when a weight is 0).
    """

    def __init__(self, grid: int):
        super().__init__()
        self.grid = grid
        self.register_buffer("dst", _window_offsets(grid), persistent=False)
        self.register_buffer("channel", torch.arange(3).reshape(1, 3, 1, 1, 1), persistent=False)
        self.register_buffer("bytes_per_pixel", torch.tensor(3), persistent=False)

    # Whether the graph branches (torch.cond: ONNX If) to `at_input_size` for photos of exactly
    # 16G x 16G. A runtime without control flow takes the general path for every size (the same
    # numbers: at 16G its taps are the pixels themselves); export_form() builds that program.
    fast_path = True
    # How the general path reads the photo: "gather" (one element gather of bytes: fastest in
    # onnxruntime and eager) or "rows" (whole rows, then columns: fastest in ExecuTorch, whose
    # portable gather and int64 offset maths cost more than the rest of the model). The same
    # arithmetic on the same bytes in the same order: bit-identical outputs (tests/test_model.py).
    GENERAL_FORMS = ("gather", "rows")
    general = "gather"
    # A program for 16G x 16G photos only (no resize at all): ExecuTorch's second method.
    square_only = False

    def forward(self, photo: torch.Tensor) -> torch.Tensor:
        if self.square_only:
            return self.at_input_size_by_rows(photo)
        if not self.fast_path:
            return self.resized_by_rows(photo) if self.general == "rows" else self.resized(photo)
        size = CELL * self.grid
        return torch.cond((photo.shape[1] == size) & (photo.shape[2] == size), self.at_input_size, self.resized, (photo,))

    def at_input_size(self, photo: torch.Tensor) -> torch.Tensor:
        """A 16G x 16G photo: the resize is the identity, so the windows are the photo's own pixels
        at rows and columns 16i+6..16i+9. Two gathers of whole rows, then of 4G-byte column blocks
        (after a transpose of the 4G selected rows), instead of the ~60 small nodes of `resized`:
        measured 0.222 vs 0.338 ms for the whole model (onnxruntime, 1 thread, G=14), where the
        square-only graph before whole photos took 0.220."""
        taps = self.dst.long()
        rows = photo.index_select(1, taps).permute(0, 2, 3, 1)  # [B,W,3,4G]
        cells = rows.index_select(1, taps)  # [B,4G columns,3,4G rows]
        # contiguous: both branches of torch.cond must return the same memory layout
        return cells.permute(0, 2, 3, 1).contiguous().float() / 255.0

    def resized(self, photo: torch.Tensor) -> torch.Tensor:
        """Any size: the reference's resize evaluated at the windows' rows and columns."""
        height, width = photo.shape[1], photo.shape[2]
        w = 4 * self.grid
        # Shapes below name the batch as -1 (or flatten): a reshape to a shape computed from the
        # symbolic batch exports as a Shape/Gather/Concat chain per reshape, and at 16G those
        # small nodes cost more than the gather itself (onnxruntime, measured).
        lower, upper, weight = self._taps(height, width)  # each [2,4G]: row taps, column taps
        # Byte offsets into each flattened photo, laid out [B, 3, (row tap, row) 2*4G, column tap,
        # 4G] so that each blend takes whole contiguous blocks (rank 5: CoreML's limit). A two-index gather would export as a
        # Transpose of the whole photo plus GatherND (4 ms at 12 MP); a Gather of 3-byte pixels
        # costs 2.5x more than GatherElements of bytes (onnxruntime, measured).
        taps = torch.stack([lower, upper], dim=1)  # [2 axes, 2 taps, 4G]
        # Integer maths without Python scalars: torchao's prepare_pt2e (ExecuTorch int8) lifts a
        # scalar into a float32 constant, which would turn these byte offsets into floats.
        rows = (taps[0] * (3 * width)).reshape(1, 1, 2 * w, 1, 1)
        cols = (taps[1] * self.bytes_per_pixel).reshape(1, 1, 1, 2, w)
        # Each photo keeps its own row of the flattened view: folding the batch in as well would
        # make one dimension of up to batch x 8192 x 8192 x 3, past the int32 sizes of an
        # ExecuTorch program. The zeros give the offsets their batch dimension in the same add
        # (x - x of the photo's first byte: prepare_pt2e also drops torch.zeros' dtype keyword).
        first = photo[:, :1, :1, :1].to(torch.long)
        per_photo = (first - first).reshape(-1, 1, 1, 1, 1)
        offsets = (per_photo + self.channel + rows + cols).flatten(1)
        px = torch.gather(photo.flatten(1), 1, offsets).reshape(-1, 2, w).float()
        left, right = px.unbind(1)
        cw1 = weight[1]
        across = left * (1.0 - cw1) + right * cw1  # columns blended: [B*3*2*4G, 4G]
        top, bottom = across.reshape(-1, 2, w, w).unbind(1)
        rw1 = weight[0][:, None]
        window = top * (1.0 - rw1) + bottom * rw1  # rows blended: [B*3, 4G, 4G]
        return (window / 255.0).reshape(-1, 3, w, w)

    def at_input_size_by_rows(self, photo: torch.Tensor) -> torch.Tensor:
        """`at_input_size` for a program that takes only 16G x 16G photos (ExecuTorch's second
        method): the windows' rows, then their columns (index_select), cast and scaled, channels
        last until the end, so no uint8 transpose runs on a portable kernel. Bit for bit what
        `resized` computes at 16G (its second taps have weight 0: x * 1 + y * 0 is x)."""
        taps = self.dst.long()
        px = photo.index_select(1, taps).index_select(2, taps).float()  # [B, 4G, 4G, 3]
        # contiguous, as `resized` returns: a channels-last view would let a multi-threaded eager /
        # Lite Interpreter convolution pick another kernel and round differently (measured)
        return (px / 255.0).permute(0, 3, 1, 2).contiguous()

    def resized_by_rows(self, photo: torch.Tensor) -> torch.Tensor:
        """`resized`, reading whole rows: the 2 x 4G source rows the windows need (index_select of
        W*3-byte blocks), then their 2 x 4G columns (3-byte blocks), blended in the same order
        (columns, then rows) and with the same float32 operations as `resized`: bit-identical.
        The gathered pixels are made channels-first before the blends, so each weight multiplies a
        contiguous run of 4G columns: channels-last, XNNPACK's broadcasting multiplies had a
        3-float inner loop: its multiplies took 41 of the method's 466 us at 1024x768, 12 after
        (ExecuTorch 1 thread, ETDump, G=14). Measured in ExecuTorch (XNNPACK, 1 thread, G=14, this
        part alone): 0.19 vs 0.46 ms for the element gather at 1024x768; in onnxruntime it is
        slower than `resized` (3-byte blocks), so ONNX targets keep that one."""
        height, width = photo.shape[1], photo.shape[2]
        w = 4 * self.grid
        lower, upper, weight = self._taps(height, width)  # each [2,4G]: row taps, column taps
        taps = torch.stack([lower, upper], dim=1)  # [2 axes, 2 taps, 4G]
        rows = photo.index_select(1, taps[0].flatten())  # [B, 2*4G, W, 3]: whole rows
        px = rows.index_select(2, taps[1].flatten()).float()  # [B, (row tap, row), (column tap, column), 3]
        px = px.permute(0, 3, 1, 2)  # [B, 3, (row tap, row), (column tap, column)]
        left, right = px.reshape(-1, 3, 2 * w, 2, w).unbind(3)
        cw1 = weight[1]
        across = left * (1.0 - cw1) + right * cw1  # columns blended: [B, 3, 2*4G, 4G]
        top, bottom = across.reshape(-1, 3, 2, w, w).unbind(2)
        rw1 = weight[0][:, None]
        window = top * (1.0 - rw1) + bottom * rw1  # rows blended: [B, 3, 4G, 4G]
        return window / 255.0

    def _taps(self, height, width):
        n = torch.stack([torch.scalar_tensor(height, dtype=torch.float32),
                         torch.scalar_tensor(width, dtype=torch.float32)])[:, None]  # [2,1]
        return resize_taps(self.dst, n, CELL * self.grid)


class TextureArray(nn.Module):
    """The photo, uint8 [B,H,W,3] -> the reference's 13 texture channels on the G x G grid.

    Channels: RGB, L*/100, (a*+128)/255, Sobel gx, gy, magnitude (each min-maxed), y, x,
    eccentricity, magnitude again, L*/100 again. Every channel is the mean of its per-pixel value
    at the 4 bilinear taps of the cell, which is exactly the reference's bilinear sampling.
    One strided convolution over each cell's 4 x 4 window yields every linear quantity; the
    costly colour maths (pow, cube root) then runs on the 4 taps only, G*G*12 values.
    """

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.grid = cfg.grid
        self.windows = PhotoWindows(cfg.grid)
        self.register_buffer("window_kernel", _window_kernel(), persistent=False)
        for name, value in _colour_kernels().items():
            self.register_buffer(name, value, persistent=False)
        lin = torch.linspace(0.0, 1.0, cfg.grid)
        yy, xx = torch.meshgrid(lin, lin, indexing="ij")
        ecc = torch.sqrt((yy - 0.5) ** 2 + (xx - 0.5) ** 2)
        pos = torch.stack([yy, xx, ecc / ecc.max()]).unsqueeze(0)
        self.register_buffer("positions", pos, persistent=False)

    def forward(self, photo: torch.Tensor) -> torch.Tensor:
        return self.from_windows(self.windows(photo))

    def from_windows(self, windows: torch.Tensor) -> torch.Tensor:
        """[B,3,4G,4G] cell windows (PhotoWindows) -> [B,13,G,G]."""
        cells = F.conv2d(windows, self.window_kernel, stride=4)  # [B,25,G,G]
        linear_rgb = _srgb_to_linear(cells[:, _TAP_VALUES])
        lab = F.conv2d(_lab_f(F.conv2d(linear_rgb, self.xy)), self.lab, self.lab_bias)  # [B,2,G,G]
        grads = cells[:, _GX_TAPS.start : _GY_TAPS.stop]
        mag = torch.sqrt(F.conv2d(grads * grads, self.pairs, self.mag_eps)).mean(dim=1, keepdim=True)
        edges = minmax_per_sample_channels(torch.cat([cells[:, _G_MEANS], mag], dim=1))  # gx, gy, mag
        pos = self.positions.expand(windows.shape[0], -1, -1, -1)
        return torch.cat([cells[:, _RGB_MEANS], lab, edges, pos, edges[:, 2:3], lab[:, 0:1]], dim=1)


def minmax_per_sample_channels(x: torch.Tensor) -> torch.Tensor:
    """Min-max each channel of each sample of x [B,C,H,W] over its H x W values."""
    lo = x.amin(dim=(2, 3), keepdim=True)
    hi = x.amax(dim=(2, 3), keepdim=True)
    return (x - lo) / (hi - lo + _MINMAX_EPS)


def per_patch(textures: torch.Tensor) -> torch.Tensor:
    """[B,C,G,G] -> [B,G*G,C]: one row per patch, so per-patch reductions and products run over
    the contiguous last axis (onnxruntime's softmax and sums over a middle axis cost ~10x more)."""
    return textures.flatten(2).transpose(1, 2)


def information_score(textures: torch.Tensor) -> torch.Tensor:
    """Propositional knowing: entropy of the channel softmax, [B,G*G] in [0,1]."""
    probs = F.softmax(per_patch(textures), dim=-1)
    entropy = -(probs * torch.log(probs + 1e-10)).sum(dim=-1)
    return minmax_per_sample(entropy)


def perspectival_score(textures: torch.Tensor) -> torch.Tensor:
    """Perspectival knowing: the Sobel magnitude channel (already in [0,1]), [B,G*G]."""
    return textures[:, CH_SOBEL_MAG].flatten(1)


PARTICIPATORY_FORMS = ("direct", "reduced")


class ParticipatoryScorer(nn.Module):
    """Participatory knowing: textures projected into query space, cosine with the query.

    Two exact forms of the same score (the reference computes `direct`):
      direct:  cos(q, W2 h + b2) with the D-wide projection of every patch (h = ReLU(W1 t + b1));
      reduced: numerator (W2^T q^)·h + q^·b2 and squared norm h^T (W2^T W2) h + 2 (W2^T b2)·h + |b2|^2,
               so per patch only 64-wide products remain (the D x 64 work happens once per query,
               and W2^T W2, W2^T b2, |b2|^2 are constants of the checkpoint).
    Equal in real arithmetic; in float32 within ~1e-6 (tests/test_reference.py holds both to the
    oracle). `form` picks one; targets choose by measurement and the manifest records which.
    """

    DERIVED = ("gram", "w2t_b2", "b2_sq")  # buffers computed from the learned W2, b2

    def __init__(self, cfg: ModelConfig, form: str = "reduced"):
        super().__init__()
        self.texture_proj = nn.Sequential(
            nn.Conv2d(TEXTURE_CHANNELS, cfg.proj_hidden, kernel_size=1),
            nn.ReLU(),
            nn.Conv2d(cfg.proj_hidden, cfg.query_dim, kernel_size=1),
        )
        self.form = form
        # The reduced form's constants of the checkpoint, refreshed whenever weights are loaded.
        shapes = {"gram": (cfg.proj_hidden, cfg.proj_hidden), "w2t_b2": (cfg.proj_hidden,), "b2_sq": ()}
        for name in self.DERIVED:
            self.register_buffer(name, torch.zeros(shapes[name]), persistent=False)
        self.register_load_state_dict_post_hook(lambda module, keys: module.refresh_constants())
        self.refresh_constants()

    @torch.no_grad()
    def refresh_constants(self) -> None:
        w2, b2 = self.texture_proj[2].weight.flatten(1).double(), self.texture_proj[2].bias.double()
        # accumulated in float64: these sums run over D (up to 2048) terms
        self.gram.copy_(w2.t() @ w2)
        self.w2t_b2.copy_(w2.t() @ b2)
        self.b2_sq.copy_(b2 @ b2)

    def forward(self, textures: torch.Tensor, query: torch.Tensor) -> torch.Tensor:
        if self.form == "direct" or self.training:
            feats = F.normalize(self.texture_proj(textures), dim=1)
            q = F.normalize(query, dim=1)[:, :, None, None]
            return ((feats * q).sum(dim=1).flatten(1) + 1.0) / 2.0
        return (self._reduced_cosine(textures, query) + 1.0) / 2.0

    def _reduced_cosine(self, textures: torch.Tensor, query: torch.Tensor) -> torch.Tensor:
        conv1, conv2 = self.texture_proj[0], self.texture_proj[2]
        w2, b2 = conv2.weight.flatten(1), conv2.bias  # [D,64], [D]
        h = F.relu(F.linear(per_patch(textures), conv1.weight.flatten(1), conv1.bias))  # [B,N,64]
        q = F.normalize(query, dim=1)
        a = q @ w2  # [B,64]: W2^T q^, one D x 64 product per query
        # (q * b2).sum, not q @ b2: CoreML's matmul takes no 1-D operand
        numerator = (h @ a.unsqueeze(2)).squeeze(2) + (q * b2).sum(dim=1, keepdim=True)  # [B,N]
        # W2^T W2 is symmetric, so h @ gram is (gram h) per patch; 2 W2^T b2 joins before the sum
        sq_norm = ((h @ self.gram + 2.0 * self.w2t_b2) * h).sum(dim=2) + self.b2_sq
        # F.normalize divides by max(norm, 1e-12): the same guard on the squared norm
        return numerator / sq_norm.clamp(min=0.0).sqrt().clamp(min=1e-12)


def participatory_evidence(participatory: torch.Tensor) -> torch.Tensor:
    """The query's absolute evidence, [B,N] participatory map ((cos + 1) / 2, before the balancer
    and any min-max) -> [B,4] float32 in EVIDENCE_NAMES order: mean of the strongest cells, mean,
    lowest, highest. Per sample, so a photo's evidence does not depend on its batch-mates."""
    n = strongest_cells(int(participatory.shape[1]))  # int(): a traced shape is a tensor (the .ptl tracer)
    top = torch.topk(participatory, k=n, dim=1, sorted=False).values.mean(dim=1)
    stats = [top, participatory.mean(dim=1), participatory.amin(dim=1), participatory.amax(dim=1)]
    return torch.stack(stats, dim=1)


class TensionBalancer(nn.Module):
    """(mean, max, std) of each map + query -> softmax weights over the three maps."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        h = cfg.balancer_hidden
        self.weight_predictor = nn.Sequential(
            nn.Linear(9 + cfg.query_dim, h),
            nn.ReLU(),
            nn.Linear(h, h),
            nn.ReLU(),
            nn.Linear(h, 3),
            nn.Softmax(dim=-1),
        )

    @staticmethod
    def summarise(maps: torch.Tensor) -> torch.Tensor:
        """maps [B,3,N] -> [B,9]: (mean, max, std) for each map in turn."""
        stats = torch.stack([maps.mean(dim=2), maps.amax(dim=2), maps.std(dim=2)], dim=2)
        return stats.flatten(1)

    def forward(self, maps: torch.Tensor, query: torch.Tensor):
        weights = self.weight_predictor(torch.cat([self.summarise(maps), query], dim=1))
        relevance = minmax_per_sample((weights[:, :, None] * maps).sum(dim=1))
        return relevance, weights


class RelevanceModel(nn.Module):
    """texture -> three ways of knowing -> tension balancer -> top-K allocator."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.texture = TextureArray(cfg)
        self.participatory_scorer = ParticipatoryScorer(cfg)
        self.balancer = TensionBalancer(cfg)

    def forward(self, image: torch.Tensor, query: torch.Tensor):
        return self.from_textures(self.texture(image), query)  # image: uint8 [B,H,W,3], as decoded

    def from_textures(self, textures: torch.Tensor, query: torch.Tensor):
        """Everything after the texture: many queries on one photo need its texture once."""
        participatory = self.participatory_scorer(textures, query)  # [B,N]
        maps = torch.stack([information_score(textures), perspectival_score(textures), participatory], dim=1)
        relevance, weights = self.balancer(maps, query)  # maps: [B,3,N]
        topk_indices = torch.topk(relevance, k=self.cfg.top_k, dim=1, sorted=True).indices
        return relevance, topk_indices, weights, participatory_evidence(participatory)


def build_model(cfg: ModelConfig, seed: int | None = None) -> RelevanceModel:
    """A model in eval mode; `seed` gives a reproducible initialisation."""
    if seed is not None:
        gen_state = torch.random.get_rng_state()
        torch.manual_seed(seed)
    model = RelevanceModel(cfg)
    if seed is not None:
        torch.random.set_rng_state(gen_state)
    return model.eval()


def learned_shapes(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Expected state-dict keys and shapes (the reference layout)."""
    return {k: tuple(v.shape) for k, v in RelevanceModel(cfg).state_dict().items()}
