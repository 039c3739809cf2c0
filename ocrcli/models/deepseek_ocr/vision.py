"""DeepEncoder: SAM-ViT-B -> 16x conv compressor -> CLIP-L fed SAM features -> concat.

Attribute names are the checkpoint's (`sam_model.blocks.N.attn.qkv`, `vision_model.
transformer.layers.N.self_attn.qkv_proj`, ...), so the official state dict loads 1:1.

Shapes: N images, S input side, h x w SAM grid (S/16), C channels, L = h*w / 16 output tokens.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .config import ClipConfig, SamConfig


def init_normal(param: nn.Parameter, std: float = 0.02) -> None:
    """Random init for a freshly built module. Skipped on the meta device, where the loader
    builds the tree before assigning the checkpoint's tensors: there is nothing to draw,
    and the first normal_ on meta costs 1.5 s (it imports torch's Python reference ops)."""
    if not param.is_meta:
        nn.init.normal_(param, std=std)


def resize_grid_table(table: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """table [1,C,h,w] -> [1,C,size]: bicubic with antialias, computed in float32 (both
    position tables are resized this way by the official code), cast back."""
    if tuple(table.shape[-2:]) == tuple(size):
        return table
    resized = F.interpolate(
        table.float(), size=size, mode="bicubic", align_corners=False, antialias=True
    )
    return resized.to(table.dtype)


# ----------------------------------------------------------------------------------- SAM


def relative_position_rows(q_len: int, k_len: int, table: torch.Tensor) -> torch.Tensor:
    """table [2M-1, D] learned for an M-wide grid -> [q_len, k_len, D] offsets for this grid.

    A grid of another size interpolates the table linearly to 2*max(q,k)-1 rows first.
    """
    rows = 2 * max(q_len, k_len) - 1
    if table.shape[0] != rows:
        resized = F.interpolate(table.T[None].float(), size=rows, mode="linear")[0].T
        table = resized.to(table.dtype)
    # Offsets are scaled onto the longer side when query and key grids differ.
    q_coords = torch.arange(q_len, device=table.device)[:, None] * max(k_len / q_len, 1.0)
    k_coords = torch.arange(k_len, device=table.device)[None, :] * max(q_len / k_len, 1.0)
    offsets = (q_coords - k_coords) + (k_len - 1) * max(q_len / k_len, 1.0)
    return table[offsets.long()]


class SamAttention(nn.Module):
    """MHA over a [B,h,w,C] grid with MViTv2's decomposed relative position bias."""

    def __init__(self, dim: int, heads: int, rel_pos_grid: int):
        super().__init__()
        self.heads = heads
        head_dim = dim // heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        # 2M-1 relative offsets per axis, M = the window (or the global grid) side.
        self.rel_pos_h = nn.Parameter(torch.empty(2 * rel_pos_grid - 1, head_dim))
        self.rel_pos_w = nn.Parameter(torch.empty(2 * rel_pos_grid - 1, head_dim))
        init_normal(self.rel_pos_h)
        init_normal(self.rel_pos_w)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, h, w, _ = x.shape  # [B,h,w,C]
        qkv = self.qkv(x).reshape(b, h * w, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)  # [B,H,hw,D]
        # The bias uses the unscaled query: q.R_h + q.R_w, added to the scaled logits.
        table_h = relative_position_rows(h, h, self.rel_pos_h)  # [h,h,D]
        table_w = relative_position_rows(w, w, self.rel_pos_w)  # [w,w,D]
        grid_q = q.reshape(b, self.heads, h, w, -1)
        bias_h = torch.einsum("bnhwd,hkd->bnhwk", grid_q, table_h)  # [B,H,h,w,h]
        bias_w = torch.einsum("bnhwd,wkd->bnhwk", grid_q, table_w)  # [B,H,h,w,w]
        bias = (bias_h[..., :, None] + bias_w[..., None, :]).reshape(b, self.heads, h * w, h * w)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)  # [B,H,hw,D]
        return self.proj(out.transpose(1, 2).reshape(b, h, w, -1))


class SamMlp(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.lin1 = nn.Linear(dim, hidden)
        self.lin2 = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin2(F.gelu(self.lin1(x)))  # exact (erf) GELU


def window_partition(x: torch.Tensor, window: int) -> tuple[torch.Tensor, tuple[int, int]]:
    """[B,h,w,C] -> [B*nh*nw, window, window, C], zero-padding h and w to multiples."""
    b, h, w, c = x.shape
    pad_h, pad_w = (-h) % window, (-w) % window
    x = F.pad(x, (0, 0, 0, pad_w, 0, pad_h))
    hp, wp = h + pad_h, w + pad_w
    x = x.reshape(b, hp // window, window, wp // window, window, c)
    return x.permute(0, 1, 3, 2, 4, 5).reshape(-1, window, window, c), (hp, wp)


def window_unpartition(
    windows: torch.Tensor, window: int, padded: tuple[int, int], size: tuple[int, int]
) -> torch.Tensor:
    """Inverse of window_partition, cropping the padding: -> [B,h,w,C]."""
    hp, wp = padded
    b = windows.shape[0] // ((hp // window) * (wp // window))
    x = windows.reshape(b, hp // window, wp // window, window, window, -1)
    x = x.permute(0, 1, 3, 2, 4, 5).reshape(b, hp, wp, -1)
    return x[:, : size[0], : size[1]].contiguous()


class SamBlock(nn.Module):
    def __init__(self, cfg: SamConfig, window: int):
        super().__init__()
        self.window = window  # 0: global attention over the whole grid
        self.norm1 = nn.LayerNorm(cfg.width, eps=cfg.layer_norm_eps)
        self.attn = SamAttention(cfg.width, cfg.heads, window if window else cfg.grid)
        self.norm2 = nn.LayerNorm(cfg.width, eps=cfg.layer_norm_eps)
        self.mlp = SamMlp(cfg.width, cfg.mlp_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [B,h,w,C]
        y = self.norm1(x)
        if self.window:
            size = y.shape[1:3]
            windows, padded = window_partition(y, self.window)
            y = window_unpartition(self.attn(windows), self.window, padded, size)
        else:
            y = self.attn(y)
        x = x + y
        return x + self.mlp(self.norm2(x))


class LayerNorm2d(nn.Module):
    """LayerNorm over the channels of each pixel of a [B,C,h,w] map."""

    def __init__(self, channels: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(channels))
        self.bias = nn.Parameter(torch.zeros(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mean = x.mean(1, keepdim=True)
        var = (x - mean).pow(2).mean(1, keepdim=True)
        x = (x - mean) / torch.sqrt(var + self.eps)
        return self.weight[:, None, None] * x + self.bias[:, None, None]


class PatchEmbed(nn.Module):
    def __init__(self, cfg: SamConfig):
        super().__init__()
        self.proj = nn.Conv2d(3, cfg.width, kernel_size=cfg.patch_size, stride=cfg.patch_size)

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        return self.proj(pixels).permute(0, 2, 3, 1)  # [N,3,S,S] -> [N,h,w,C]


class SamEncoder(nn.Module):
    """`model.sam_model`: [N,3,S,S] -> [N, downsample_channels[-1], S/64, S/64]."""

    def __init__(self, cfg: SamConfig):
        super().__init__()
        self.patch_embed = PatchEmbed(cfg)
        self.pos_embed = nn.Parameter(torch.empty(1, cfg.grid, cfg.grid, cfg.width))
        init_normal(self.pos_embed)
        self.blocks = nn.ModuleList(
            SamBlock(cfg, 0 if i in cfg.global_attn_indexes else cfg.window_size)
            for i in range(cfg.layers)
        )
        n = cfg.neck_channels
        self.neck = nn.Sequential(  # checkpoint names neck.0 .. neck.3
            nn.Conv2d(cfg.width, n, kernel_size=1, bias=False),
            LayerNorm2d(n, eps=cfg.layer_norm_eps),
            nn.Conv2d(n, n, kernel_size=3, padding=1, bias=False),
            LayerNorm2d(n, eps=cfg.layer_norm_eps),
        )
        mid, out = cfg.downsample_channels
        # The 16x token compressor: two stride-2 convs and no activation between them.
        self.net_2 = nn.Conv2d(n, mid, kernel_size=3, stride=2, padding=1, bias=False)
        self.net_3 = nn.Conv2d(mid, out, kernel_size=3, stride=2, padding=1, bias=False)

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        x = self.patch_embed(pixels)  # [N,h,w,C]
        pos = resize_grid_table(self.pos_embed.permute(0, 3, 1, 2), tuple(x.shape[1:3]))
        x = x + pos.permute(0, 2, 3, 1)
        for block in self.blocks:
            x = block(x)
        x = self.neck(x.permute(0, 3, 1, 2))  # [N,neck,h,w]
        return self.net_3(self.net_2(x))  # [N,out,ceil(h/4),ceil(w/4)]


# ---------------------------------------------------------------------------------- CLIP


class ClipEmbeddings(nn.Module):
    def __init__(self, cfg: ClipConfig):
        super().__init__()
        self.grid = cfg.grid
        self.class_embedding = nn.Parameter(torch.empty(cfg.width))
        init_normal(self.class_embedding)
        # Stored in the checkpoint but never run: the patches come from SAM.
        self.patch_embedding = nn.Conv2d(
            3, cfg.width, kernel_size=cfg.patch_size, stride=cfg.patch_size, bias=False
        )
        self.position_embedding = nn.Embedding(cfg.grid * cfg.grid + 1, cfg.width)

    def forward(self, patches: torch.Tensor) -> torch.Tensor:
        n, c, h, w = patches.shape  # SAM features [N,C,h,w]
        tokens = patches.flatten(2).transpose(1, 2)  # [N,hw,C]
        cls = self.class_embedding.to(tokens.dtype).expand(n, 1, c)
        table = self.position_embedding.weight  # [1+g*g, C]
        grid_part = table[1:].reshape(1, self.grid, self.grid, c).permute(0, 3, 1, 2)
        grid_part = resize_grid_table(grid_part, (h, w)).permute(0, 2, 3, 1).reshape(h * w, c)
        pos = torch.cat([table[:1], grid_part], dim=0)  # [1+hw, C]
        return torch.cat([cls, tokens], dim=1) + pos


class ClipAttention(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.qkv_proj = nn.Linear(dim, 3 * dim)  # fused q|k|v
        self.out_proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q, k, v = self.qkv_proj(x).reshape(b, t, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        out = F.scaled_dot_product_attention(q, k, v)  # [B,H,T,D], no mask
        return self.out_proj(out.transpose(1, 2).reshape(b, t, -1))


class ClipMlp(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc1(x)
        return self.fc2(h * torch.sigmoid(1.702 * h))  # quick_gelu


class ClipLayer(nn.Module):
    def __init__(self, cfg: ClipConfig):
        super().__init__()
        self.layer_norm1 = nn.LayerNorm(cfg.width, eps=cfg.layer_norm_eps)
        self.self_attn = ClipAttention(cfg.width, cfg.heads)
        self.layer_norm2 = nn.LayerNorm(cfg.width, eps=cfg.layer_norm_eps)
        self.mlp = ClipMlp(cfg.width, cfg.mlp_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.self_attn(self.layer_norm1(x))
        return x + self.mlp(self.layer_norm2(x))


class ClipTransformer(nn.Module):
    def __init__(self, cfg: ClipConfig):
        super().__init__()
        self.layers = nn.ModuleList(ClipLayer(cfg) for _ in range(cfg.layers))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


class ClipVisionModel(nn.Module):
    """`model.vision_model`: SAM features [N,C,h,w] -> [N,1+hw,C] (CLS first, no post-LN)."""

    def __init__(self, cfg: ClipConfig):
        super().__init__()
        self.embeddings = ClipEmbeddings(cfg)
        self.pre_layrnorm = nn.LayerNorm(cfg.width, eps=cfg.layer_norm_eps)  # (sic)
        self.transformer = ClipTransformer(cfg)

    def forward(self, sam_features: torch.Tensor) -> torch.Tensor:
        return self.transformer(self.pre_layrnorm(self.embeddings(sam_features)))


class MlpProjector(nn.Module):
    """`model.projector` of type "linear": its one Linear is stored as `layers`."""

    def __init__(self, in_dim: int, out_dim: int):
        super().__init__()
        self.layers = nn.Linear(in_dim, out_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


def deep_encoder_features(
    sam: SamEncoder, clip: ClipVisionModel, pixels: torch.Tensor
) -> tuple[torch.Tensor, tuple[int, int]]:
    """pixels [N,3,S,S] -> fused features [N,L,2C] (CLIP half first) and the (h,w) grid."""
    sam_features = sam(pixels)  # [N,C,h,w]
    clip_tokens = clip(sam_features)  # [N,1+hw,C]
    h, w = sam_features.shape[-2:]
    fused = torch.cat([clip_tokens[:, 1:], sam_features.flatten(2).transpose(1, 2)], dim=-1)
    return fused, (h, w)


def compressed_side(size: int, patch: int) -> int:
    """Tokens per side that SAM + the two stride-2 convs give for a `size`-pixel square."""
    side = size // patch
    for _ in range(2):
        side = (side + 1) // 2  # k3 s2 p1
    return side


def layout_visual_tokens(
    global_features: torch.Tensor,  # [q*q, d] projected
    global_grid: tuple[int, int],
    newline: torch.Tensor,  # [d]
    separator: torch.Tensor,  # [d]
    tile_features: torch.Tensor | None = None,  # [n_tiles, t*t, d] row-major tiles
    tile_grid: tuple[int, int] = (1, 1),  # feature grid of one tile (t, t)
    tiles_across_down: tuple[int, int] = (1, 1),
) -> torch.Tensor:
    """The sequence the decoder reads at the <image> slots: local tiles as one big grid with
    a newline after each row, then the global view likewise, then the separator."""
    d = global_features.shape[-1]
    parts = []
    if tile_features is not None and tile_features.shape[0] > 0:
        across, down = tiles_across_down
        th, tw = tile_grid
        big = tile_features.reshape(down, across, th, tw, d).permute(0, 2, 1, 3, 4)
        big = big.reshape(down * th, across * tw, d)
        rows_nl = newline.to(big.dtype).expand(down * th, 1, d)
        parts.append(torch.cat([big, rows_nl], dim=1).reshape(-1, d))
    gh, gw = global_grid
    grid = global_features.reshape(gh, gw, d)
    rows_nl = newline.to(grid.dtype).expand(gh, 1, d)
    parts.append(torch.cat([grid, rows_nl], dim=1).reshape(-1, d))
    parts.append(separator.to(grid.dtype)[None])
    return torch.cat(parts, dim=0)
