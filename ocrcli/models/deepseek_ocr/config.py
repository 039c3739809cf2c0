"""Configurations for DeepSeek-OCR and Jina-OCR-v1, full size and tiny.

Plain dataclasses, one per component (gpt-fast style). `config_from_hf` reads a checkpoint's
config.json; `config_to_hf` writes one that `config_from_hf` reads back (the tiny checkpoint
writer uses it). Sizes that the official config.json does not carry (SAM MLP width, neck
channels, window, patch sizes) are the dataclass defaults; a tiny config.json carries them
explicitly so that the same reader rebuilds the scaled-down architecture.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any

DEEPSEEK_OCR = "deepseek-ocr"
JINA_OCR_V1 = "jina-ocr-v1"
ARCHES = (DEEPSEEK_OCR, JINA_OCR_V1)

# The input size SAM's stored pos_embed is sized for; the official image modes assume it.
REFERENCE_SAM_IMAGE_SIZE = 1024


@dataclass(frozen=True)
class SamConfig:
    """SAM-ViT-B with neck and the 16x conv compressor (`model.sam_model`)."""

    image_size: int = 1024  # pos_embed is [1, image_size/patch, image_size/patch, width]
    patch_size: int = 16
    width: int = 768
    layers: int = 12
    heads: int = 12
    mlp_dim: int = 3072
    window_size: int = 14
    global_attn_indexes: tuple[int, ...] = (2, 5, 8, 11)
    neck_channels: int = 256
    downsample_channels: tuple[int, int] = (512, 1024)
    layer_norm_eps: float = 1e-6

    @property
    def grid(self) -> int:
        return self.image_size // self.patch_size


@dataclass(frozen=True)
class ClipConfig:
    """CLIP-L/14 that reads SAM's output as its patch embeddings (`model.vision_model`)."""

    width: int = 1024
    layers: int = 24
    heads: int = 16
    mlp_dim: int = 4096
    patch_size: int = 14  # only the shape of the unused patch conv depends on it
    image_size: int = 224  # position table rows = (image_size / patch_size)^2 + 1
    layer_norm_eps: float = 1e-5

    @property
    def grid(self) -> int:
        return self.image_size // self.patch_size


@dataclass(frozen=True)
class DecoderConfig:
    """DeepSeek-V2 decoder with plain MHA (no MLA), one dense layer, then MoE layers."""

    vocab_size: int = 129280
    hidden_size: int = 1280
    layers: int = 12
    heads: int = 10
    intermediate_size: int = 6848  # dense SwiGLU (layer 0, and the MTP block)
    moe_intermediate_size: int = 896
    first_k_dense_replace: int = 1
    n_routed_experts: int = 64
    experts_per_token: int = 6
    n_shared_experts: int = 2  # merged into one SwiGLU of moe_intermediate_size * 2
    routed_scaling_factor: float = 1.0
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10_000.0
    max_position_embeddings: int = 8192

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.heads


@dataclass(frozen=True)
class MtpConfig:
    """Jina's FastMTP draft head (`mtp_module.heads.0`), applied recursively.

    Switches for the points the public sources leave open (Jina's `deepseek_ocr_mtp.py` is
    known only through third-party ports: the order of eh_proj's inputs, which target hidden
    feeds the first step); the defaults follow the ports that reach high acceptance.
    Changing them never affects correctness of the verified output, only acceptance.
    """

    num_heads: int = 1
    speculative_steps: int = 3  # K; the engine may draft fewer
    # "embed_hidden": eh_proj(concat[enorm(e), hnorm(h)]) (DeepSeek-V3 / Jina ports);
    # "hidden_embed": the reversed order of FastMTP's MiMo code.
    concat_order: str = "embed_hidden"
    # Which target hidden feeds the head: "post_norm" (after model.norm, MLX-Swift) or
    # "pre_norm" (before it, RLX). forward() and prefill() return this tap as `hidden`.
    target_tap: str = "post_norm"
    # The token embedding at position 0 is zeroed (vLLM deepseek_mtp style).
    zero_embed_at_position0: bool = True

    def __post_init__(self) -> None:
        if self.concat_order not in ("embed_hidden", "hidden_embed"):
            raise ValueError(f"unknown MTP concat_order {self.concat_order!r}")
        if self.target_tap not in ("post_norm", "pre_norm"):
            raise ValueError(f"unknown MTP target_tap {self.target_tap!r}")


@dataclass(frozen=True)
class DeepseekOcrConfig:
    arch: str = DEEPSEEK_OCR
    sam: SamConfig = field(default_factory=SamConfig)
    clip: ClipConfig = field(default_factory=ClipConfig)
    decoder: DecoderConfig = field(default_factory=DecoderConfig)
    mtp: MtpConfig | None = None
    image_token_id: int = 128815
    bos_id: int = 0
    eos_id: int = 1
    pad_id: int = 2

    def __post_init__(self) -> None:
        if self.arch not in ARCHES:
            raise ValueError(f"unknown arch {self.arch!r}; expected one of {ARCHES}")
        if self.clip.width != self.sam.downsample_channels[-1]:
            # CLIP consumes SAM's compressed map as its patch embeddings.
            raise ValueError("clip.width must equal sam.downsample_channels[-1]")
        if self.decoder.hidden_size % self.decoder.heads:
            raise ValueError("decoder.hidden_size must be a multiple of decoder.heads")

    @property
    def projector_input_dim(self) -> int:
        return self.clip.width + self.sam.downsample_channels[-1]

    @property
    def image_size_scale(self) -> float:
        """How the official image modes scale for this SAM (1.0 for the real models)."""
        return self.sam.image_size / REFERENCE_SAM_IMAGE_SIZE


def deepseek_ocr_config() -> DeepseekOcrConfig:
    return DeepseekOcrConfig(arch=DEEPSEEK_OCR)


def jina_ocr_v1_config() -> DeepseekOcrConfig:
    return DeepseekOcrConfig(
        arch=JINA_OCR_V1,
        decoder=DecoderConfig(rope_theta=1_000_000.0, max_position_embeddings=32768),
        mtp=MtpConfig(),
    )


def full_config(arch: str) -> DeepseekOcrConfig:
    if arch == DEEPSEEK_OCR:
        return deepseek_ocr_config()
    if arch == JINA_OCR_V1:
        return jina_ocr_v1_config()
    raise ValueError(f"unknown arch {arch!r}; expected one of {ARCHES}")


def tiny_config(arch: str, full_structure: bool = False) -> DeepseekOcrConfig:
    """Every width scaled down, for tests. The vocabulary keeps its official size so that
    the special tokens sit at their official ids, and the decoder its official
    `max_position_embeddings`, so default token caps meet the real limit. Image modes scale by
    sam.image_size / 1024 (Gundam: 128 global, 80 tiles), and window 3 forces the
    padded-window path. `full_structure` keeps the decoder's depth and experts (12 layers, 64
    routed experts, top-6) at tiny width: the operator count per step of the real model."""
    full = full_config(arch)
    depth = {} if full_structure else {"layers": 3, "n_routed_experts": 8, "experts_per_token": 3}
    return replace(
        full,
        sam=SamConfig(
            image_size=128, patch_size=16, width=32, layers=4, heads=2, mlp_dim=64,
            window_size=3, global_attn_indexes=(1, 3), neck_channels=16,
            downsample_channels=(24, 32),
        ),
        clip=ClipConfig(width=32, layers=2, heads=2, mlp_dim=64, patch_size=14, image_size=28),
        decoder=replace(
            full.decoder, hidden_size=32, heads=2, intermediate_size=64,
            moe_intermediate_size=16, **depth,
        ),
    )


# --------------------------------------------------------------------------- config.json


class ConfigError(ValueError):
    """config.json does not describe an architecture this package implements."""


def _find_dict(tree: Any, key: str) -> dict | None:
    """The first dict stored under `key` anywhere in a nested JSON tree (the official
    vision_config nests its per-tower dicts one level deeper in some revisions)."""
    if isinstance(tree, dict):
        if isinstance(tree.get(key), dict):
            return tree[key]
        for value in tree.values():
            found = _find_dict(value, key)
            if found is not None:
                return found
    return None


def _language_fields(raw: dict) -> dict:
    # Language fields appear at the top level and in language_config. The HF remote code
    # builds the decoder from the top-level config, so the top level wins where both exist.
    fields = dict(raw.get("language_config") or {})
    fields.update({k: v for k, v in raw.items() if k not in ("language_config", "vision_config")})
    return fields


def _rope_theta(lang: dict) -> float:
    if lang.get("rope_scaling"):
        raise ConfigError(f"rope_scaling {lang['rope_scaling']!r} is not supported")
    params = lang.get("rope_parameters")
    if isinstance(params, dict) and "rope_theta" in params:
        return float(params["rope_theta"])
    # DeepSeek-OCR's config omits it: DeepseekV2Config's default is 10 000.
    return float(lang.get("rope_theta", 10_000.0))


def config_from_hf(raw: dict) -> DeepseekOcrConfig:
    """Our config from a DeepSeek-OCR / Jina-OCR-v1 config.json (already parsed)."""
    lang = _language_fields(raw)
    decoder = _decoder_from_hf(lang)
    sam, clip = _vision_from_hf(raw.get("vision_config") or {})
    projector = raw.get("projector_config") or {}
    if projector.get("projector_type", "linear") != "linear":
        raise ConfigError(f"projector_type {projector['projector_type']!r} is not implemented")
    mtp = _mtp_from_hf(lang)
    arch = JINA_OCR_V1 if mtp is not None else DEEPSEEK_OCR
    try:
        return DeepseekOcrConfig(
            arch=arch,
            sam=sam,
            clip=clip,
            decoder=decoder,
            mtp=mtp,
            image_token_id=int(raw.get("image_token_index", lang.get("image_token_index", 128815))),
            bos_id=int(lang.get("bos_token_id", 0)),
            eos_id=int(lang.get("eos_token_id", 1)),
            pad_id=int(lang["pad_token_id"] if lang.get("pad_token_id") is not None else 2),
        )
    except ValueError as err:
        raise ConfigError(str(err)) from err


def _decoder_from_hf(lang: dict) -> DecoderConfig:
    if lang.get("use_mla"):
        raise ConfigError("use_mla=true: MLA attention is not implemented (DeepSeek-OCR is MHA)")
    if lang.get("topk_method", "greedy") != "greedy" or lang.get("n_group", 1) not in (1, None):
        raise ConfigError(f"MoE routing {lang.get('topk_method')!r} is not implemented")
    if lang.get("scoring_func", "softmax") != "softmax" or lang.get("norm_topk_prob"):
        raise ConfigError("only softmax routing without top-k renormalisation is implemented")
    heads = int(lang.get("num_attention_heads", 10))
    if int(lang.get("num_key_value_heads") or heads) != heads:
        raise ConfigError("grouped-query attention is not implemented (expected MHA)")
    if lang.get("moe_layer_freq", 1) != 1:
        raise ConfigError("moe_layer_freq != 1 is not implemented")
    return DecoderConfig(
        vocab_size=int(lang.get("vocab_size", 129280)),
        hidden_size=int(lang.get("hidden_size", 1280)),
        layers=int(lang.get("num_hidden_layers", 12)),
        heads=heads,
        intermediate_size=int(lang.get("intermediate_size", 6848)),
        moe_intermediate_size=int(lang.get("moe_intermediate_size", 896)),
        first_k_dense_replace=int(lang.get("first_k_dense_replace", 1)),
        n_routed_experts=int(lang.get("n_routed_experts", 64)),
        experts_per_token=int(lang.get("num_experts_per_tok", 6)),
        n_shared_experts=int(lang.get("n_shared_experts", 2) or 0),
        routed_scaling_factor=float(lang.get("routed_scaling_factor", 1.0)),
        rms_norm_eps=float(lang.get("rms_norm_eps", 1e-6)),
        rope_theta=_rope_theta(lang),
        max_position_embeddings=int(lang.get("max_position_embeddings", 8192)),
    )


def _vision_from_hf(vision: dict) -> tuple[SamConfig, ClipConfig]:
    sam_raw = _find_dict(vision, "sam_vit_b") or {}
    clip_raw = _find_dict(vision, "clip-l-14-224") or {}
    sam_defaults = SamConfig()
    sam = SamConfig(
        image_size=int(sam_raw.get("image_size", sam_defaults.image_size)),
        patch_size=int(sam_raw.get("patch_size", sam_defaults.patch_size)),
        width=int(sam_raw.get("width", sam_defaults.width)),
        layers=int(sam_raw.get("layers", sam_defaults.layers)),
        heads=int(sam_raw.get("heads", sam_defaults.heads)),
        mlp_dim=int(sam_raw.get("mlp_dim", 4 * int(sam_raw.get("width", sam_defaults.width)))),
        window_size=int(sam_raw.get("window_size", sam_defaults.window_size)),
        global_attn_indexes=tuple(
            sam_raw.get("global_attn_indexes", sam_defaults.global_attn_indexes)
        ),
        neck_channels=int(sam_raw.get("neck_channels", sam_defaults.neck_channels)),
        downsample_channels=tuple(
            sam_raw.get("downsample_channels", sam_defaults.downsample_channels)
        ),
    )
    clip_width = int(clip_raw.get("width", ClipConfig.width))
    clip = ClipConfig(
        width=clip_width,
        layers=int(clip_raw.get("layers", ClipConfig.layers)),
        heads=int(clip_raw.get("heads", ClipConfig.heads)),
        mlp_dim=int(clip_raw.get("mlp_dim", 4 * clip_width)),
        patch_size=int(clip_raw.get("patch_size", ClipConfig.patch_size)),
        image_size=int(clip_raw.get("image_size", ClipConfig.image_size)),
    )
    return sam, clip


def _mtp_from_hf(lang: dict) -> MtpConfig | None:
    if int(lang.get("num_nextn_predict_layers", 0) or 0) <= 0:
        return None
    if lang.get("mtp_moe"):
        raise ConfigError("mtp_moe=true: an MoE draft block is not implemented")
    num_heads = int(lang.get("mtp_num_heads", 1))
    if num_heads != 1 or not lang.get("mtp_recursive", True):
        raise ConfigError("only one recursively applied MTP head is implemented")
    for key in ("mtp_share_embedding_weights", "mtp_share_lm_head", "mtp_share_norm"):
        if lang.get(key, True) is False:
            raise ConfigError(f"{key}=false is not implemented (the head shares them)")
    return MtpConfig(
        num_heads=num_heads,
        speculative_steps=int(lang.get("mtp_num_speculative_steps", 3)),
    )


def config_to_hf(cfg: DeepseekOcrConfig) -> dict:
    """A config.json in the official layout (language fields at the top level and in
    language_config), plus the sizes the official file leaves implicit."""
    d = cfg.decoder
    lang = {
        "vocab_size": d.vocab_size,
        "hidden_size": d.hidden_size,
        "num_hidden_layers": d.layers,
        "num_attention_heads": d.heads,
        "num_key_value_heads": d.heads,
        "intermediate_size": d.intermediate_size,
        "moe_intermediate_size": d.moe_intermediate_size,
        "first_k_dense_replace": d.first_k_dense_replace,
        "moe_layer_freq": 1,
        "n_routed_experts": d.n_routed_experts,
        "num_experts_per_tok": d.experts_per_token,
        "n_shared_experts": d.n_shared_experts,
        "n_group": 1,
        "topk_group": 1,
        "topk_method": "greedy",
        "scoring_func": "softmax",
        "norm_topk_prob": False,
        "routed_scaling_factor": d.routed_scaling_factor,
        "rms_norm_eps": d.rms_norm_eps,
        "max_position_embeddings": d.max_position_embeddings,
        "use_mla": False,
        "q_lora_rank": None,
        "kv_lora_rank": None,
        "qk_nope_head_dim": 0,
        "qk_rope_head_dim": 0,
        "v_head_dim": 0,
        "hidden_act": "silu",
        "attention_bias": False,
        "tie_word_embeddings": False,
        "bos_token_id": cfg.bos_id,
        "eos_token_id": cfg.eos_id,
        "pad_token_id": cfg.pad_id,
    }
    if cfg.arch == JINA_OCR_V1 or d.rope_theta != 10_000.0:
        lang["rope_theta"] = d.rope_theta
    if cfg.mtp is not None:
        lang.update(
            num_nextn_predict_layers=1,
            mtp_num_heads=cfg.mtp.num_heads,
            mtp_num_speculative_steps=cfg.mtp.speculative_steps,
            mtp_recursive=True,
            mtp_share_embedding_weights=True,
            mtp_share_lm_head=True,
            mtp_share_norm=True,
            mtp_moe=False,
        )
    sam = asdict(cfg.sam)
    sam["global_attn_indexes"] = list(cfg.sam.global_attn_indexes)
    sam["downsample_channels"] = list(cfg.sam.downsample_channels)
    sam.pop("layer_norm_eps")
    clip = asdict(cfg.clip)
    clip.pop("layer_norm_eps")
    return {
        "model_type": "deepseek_vl_v2",
        "architectures": ["DeepseekOCRForCausalLM"],
        "candidate_resolutions": [[1024, 1024]],
        "global_view_pos": "head",
        "tile_tag": "2D",
        "image_token_index": cfg.image_token_id,
        "projector_config": {
            "input_dim": cfg.projector_input_dim,
            "n_embed": d.hidden_size,
            "projector_type": "linear",
        },
        "vision_config": {"width": {"sam_vit_b": sam, "clip-l-14-224": clip}},
        "language_config": dict(lang),
        **lang,
    }
