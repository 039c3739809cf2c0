"""Conformance against the reference implementations that ship inside transformers
(recent transformers releases, no remote code), with the same random weights in float32, tiny configs:

- transformers.models.unlimited_ocr: SAM-ViT-B + neck + compressor, CLIP fed SAM features,
  the CLIP-first concat, the projector and the local -> global -> separator layout (checked
  by transformers against the official DeepEncoder to 1.2e-6);
- transformers.models.deepseek_ocr2: DeepSeek-OCR's text decoder (MHA, dense layer 0, MoE
  with an fp32 softmax router, greedy top-k without renormalisation, shared experts).

Skipped, with the reason, when the installed transformers lacks these classes.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest
import torch

from ocrcli.models.base import DecodeRequest
from ocrcli.models.deepseek_ocr.config import JINA_OCR_V1, tiny_config
from ocrcli.models.deepseek_ocr.model import DeepseekOcrForCausalLM
from ocrcli.models.deepseek_ocr.preprocess import PageVisual, placeholder_count
from ocrcli.models.deepseek_ocr.runtime import DeepseekOcrDecoder
from ocrcli.models.deepseek_ocr.vision import deep_encoder_features

unlimited = pytest.importorskip(
    "transformers.models.unlimited_ocr.modeling_unlimited_ocr",
    reason="this transformers has no unlimited_ocr reference (added in 5.x)",
)
unlimited_config = pytest.importorskip(
    "transformers.models.unlimited_ocr.configuration_unlimited_ocr"
)
ocr2 = pytest.importorskip(
    "transformers.models.deepseek_ocr2.modeling_deepseek_ocr2",
    reason="this transformers has no deepseek_ocr2 reference (added in 5.x)",
)
ocr2_config = pytest.importorskip("transformers.models.deepseek_ocr2.configuration_deepseek_ocr2")

ROOT = Path(__file__).resolve().parents[2]
RTOL = 1e-5  # relative to the reference's largest magnitude


def assert_close(ours: torch.Tensor, reference: torch.Tensor) -> None:
    assert ours.shape == reference.shape
    scale = reference.abs().max().item()
    error = (ours - reference).abs().max().item()
    assert error <= RTOL * scale, f"max error {error:.3g} vs scale {scale:.3g}"


@pytest.fixture(scope="module")
def net() -> DeepseekOcrForCausalLM:
    spec = importlib.util.spec_from_file_location(
        "make_tiny_checkpoint", ROOT / "scripts" / "make_tiny_checkpoint.py"
    )
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    torch.manual_seed(0)
    model = DeepseekOcrForCausalLM(tiny_config(JINA_OCR_V1)).eval()
    script.randomize(model, torch.Generator().manual_seed(0))
    return model


# ---------------------------------------------------------------------- name mappings


def reference_vision_name(ours: str) -> str | None:
    """Our model.* vision names -> UnlimitedOcrModel's (transformers conversion_mapping)."""
    rules = [
        (r"^model\.sam_model\.", "vision_tower.sam_encoder."),
        (r"\.blocks\.(\d+)\.norm(\d)\.", r".layers.\1.layer_norm\2."),
        (r"\.blocks\.(\d+)\.", r".layers.\1."),
        (r"\.patch_embed\.proj\.", ".patch_embed.projection."),
        (r"\.neck\.0\.", ".neck.conv1."),
        (r"\.neck\.1\.", ".neck.layer_norm1."),
        (r"\.neck\.2\.", ".neck.conv2."),
        (r"\.neck\.3\.", ".neck.layer_norm2."),
        (r"\.net_2\.", ".proj.conv1."),
        (r"\.net_3\.", ".proj.conv2."),
        (r"^model\.vision_model\.transformer\.", "vision_tower.vision_encoder.encoder."),
        (r"^model\.vision_model\.", "vision_tower.vision_encoder."),
        (r"^model\.projector\.layers\.", "multi_modal_projector."),
        (r"^model\.image_newline$", "image_newline"),
        (r"^model\.view_seperator$", "view_separator"),
    ]
    vision_prefixes = ("model.sam_model.", "model.vision_model.", "model.projector.")
    if not ours.startswith(vision_prefixes) and ours not in (
        "model.image_newline",
        "model.view_seperator",
    ):
        return None
    if ours.endswith("embeddings.patch_embedding.weight"):
        return None  # stored, never used
    for pattern, replacement in rules:
        ours = re.sub(pattern, replacement, ours)
    return ours


def reference_vision_state(net: DeepseekOcrForCausalLM) -> dict[str, torch.Tensor]:
    state = {}
    for name, tensor in net.state_dict().items():
        mapped = reference_vision_name(name)
        if mapped is None:
            continue
        if ".self_attn.qkv_proj." in mapped:  # fused q|k|v -> three projections
            for part, chunk in zip("qkv", tensor.chunk(3, dim=0), strict=True):
                state[mapped.replace("qkv_proj", f"{part}_proj")] = chunk
        else:
            state[mapped] = tensor
    return state


def reference_decoder_state(net: DeepseekOcrForCausalLM) -> dict[str, torch.Tensor]:
    """Our decoder -> DeepseekOcr2TextModel: experts stacked into 3D gate_up / down."""
    cfg = net.config.decoder
    ours = net.state_dict()
    state = {"embed_tokens.weight": ours["model.embed_tokens.weight"],
             "norm.weight": ours["model.norm.weight"]}
    for i in range(cfg.layers):
        p = f"model.layers.{i}."
        for name, tensor in ours.items():
            if name.startswith(p) and ".experts." not in name:
                state[name.removeprefix("model.")] = tensor
        if i >= cfg.first_k_dense_replace:
            experts = range(cfg.n_routed_experts)
            state[f"layers.{i}.mlp.experts.gate_up_proj"] = torch.stack([
                torch.cat([ours[f"{p}mlp.experts.{e}.gate_proj.weight"],
                           ours[f"{p}mlp.experts.{e}.up_proj.weight"]])
                for e in experts
            ])
            state[f"layers.{i}.mlp.experts.down_proj"] = torch.stack(
                [ours[f"{p}mlp.experts.{e}.down_proj.weight"] for e in experts]
            )
    return state


# ------------------------------------------------------------------- reference models


@pytest.fixture(scope="module")
def reference_vision(net):
    cfg = net.config
    sam, clip, d = cfg.sam, cfg.clip, cfg.decoder
    vision = unlimited_config.UnlimitedOcrVisionConfig(
        sam_config=unlimited_config.UnlimitedOcrSamVisionConfig(
            hidden_size=sam.width, output_channels=sam.neck_channels,
            num_hidden_layers=sam.layers, num_attention_heads=sam.heads,
            image_size=sam.image_size, patch_size=sam.patch_size, window_size=sam.window_size,
            global_attn_indexes=list(sam.global_attn_indexes), mlp_dim=sam.mlp_dim,
            downsample_channels=list(sam.downsample_channels),
        ),
        encoder_config=unlimited_config.UnlimitedOcrVisionEncoderConfig(
            hidden_size=clip.width, intermediate_size=clip.mlp_dim,
            num_hidden_layers=clip.layers, num_attention_heads=clip.heads,
            image_size=clip.image_size, patch_size=clip.patch_size,
        ),
    )
    text = dict(  # the reference's text model is not compared (sliding-window attention)
        vocab_size=64, hidden_size=d.hidden_size, intermediate_size=d.intermediate_size,
        num_hidden_layers=1, num_attention_heads=d.heads, num_key_value_heads=d.heads,
        n_routed_experts=d.n_routed_experts, num_experts_per_tok=d.experts_per_token,
        n_shared_experts=d.n_shared_experts, moe_intermediate_size=d.moe_intermediate_size,
        sliding_window=16,
    )
    config = unlimited_config.UnlimitedOcrConfig(vision_config=vision, text_config=text)
    config._attn_implementation = "eager"
    model = unlimited.UnlimitedOcrModel(config).eval()
    missing, unexpected = model.load_state_dict(reference_vision_state(net), strict=False)
    assert not unexpected
    assert all(k.startswith("language_model.") for k in missing), missing
    return model


@pytest.fixture(scope="module")
def reference_decoder(net):
    d = net.config.decoder
    config = ocr2_config.DeepseekOcr2TextConfig(
        vocab_size=d.vocab_size, hidden_size=d.hidden_size, intermediate_size=d.intermediate_size,
        num_hidden_layers=d.layers, num_attention_heads=d.heads, num_key_value_heads=d.heads,
        n_routed_experts=d.n_routed_experts, num_experts_per_tok=d.experts_per_token,
        n_shared_experts=d.n_shared_experts, moe_intermediate_size=d.moe_intermediate_size,
        routed_scaling_factor=d.routed_scaling_factor, topk_method="greedy", n_group=1,
        topk_group=1, rms_norm_eps=d.rms_norm_eps,
        mlp_layer_types=["dense" if i < d.first_k_dense_replace else "sparse"
                         for i in range(d.layers)],
        rope_parameters={"rope_type": "default", "rope_theta": d.rope_theta},
        max_position_embeddings=d.max_position_embeddings,
    )
    config._attn_implementation = "eager"
    model = ocr2.DeepseekOcr2TextModel(config).eval()
    model.load_state_dict(reference_decoder_state(net), strict=True)
    return model


def pixels(n: int, side: int, seed: int) -> torch.Tensor:
    return torch.rand(n, 3, side, side, generator=torch.Generator().manual_seed(seed)) * 2 - 1


# ------------------------------------------------------------------------------ tests


@pytest.mark.parametrize("side", [128, 80, 64])  # native grid; resized pos tables; padding
def test_sam_features(net, reference_vision, side):
    x = pixels(2, side, seed=side)
    with torch.no_grad():
        ours = net.model.sam_model(x)
        reference = reference_vision.vision_tower.sam_encoder(x).last_hidden_state
    assert_close(ours, reference)


@pytest.mark.parametrize("side", [128, 80])
def test_deep_encoder_features(net, reference_vision, side):
    x = pixels(2, side, seed=10 + side)
    with torch.no_grad():
        ours, _ = deep_encoder_features(net.model.sam_model, net.model.vision_model, x)
        reference = reference_vision.vision_tower(x).last_hidden_state
    assert_close(ours, reference)


def _tiled_page() -> PageVisual:
    return PageVisual(pixels(1, 128, seed=1)[0], pixels(6, 80, seed=2), (2, 3))


def test_visual_token_layout(net, reference_vision):
    visual = _tiled_page()
    with torch.no_grad():
        (ours,) = DeepseekOcrDecoder(net).encode([visual])
        reference = reference_vision.get_image_features(
            pixel_values=visual.global_view[None],
            pixel_values_local=visual.tiles,
            num_local_patches=[6],
            patches_grid=[list(visual.tiles_across_down)],  # (columns, rows)
        ).pooler_output[0]
    assert ours.shape[0] == placeholder_count(visual)
    assert_close(ours, reference)


def test_decoder_hidden_states(net, reference_decoder):
    generator = torch.Generator().manual_seed(3)
    x = torch.randn(2, 23, net.config.decoder.hidden_size, generator=generator)
    positions = torch.arange(23)[None].expand(2, 23)
    mask = torch.ones(23, 23, dtype=torch.bool).tril()[None, None]
    with torch.no_grad():
        ours = net.model.norm(net.model.run_layers(x, positions, mask=mask))
        reference = reference_decoder(inputs_embeds=x, position_ids=positions).last_hidden_state
    assert_close(ours, reference)


def test_prefill_logits_for_a_prompt_with_image_tokens(net, reference_vision, reference_decoder):
    """The whole chain, reference side built from the two reference models: image features
    scattered into the <image> slots, the reference decoder, then the (shared) LM head."""
    cfg = net.config
    visual = _tiled_page()
    slots = placeholder_count(visual)
    prompt = [128825, 40, 41] + [cfg.image_token_id] * slots + [42, 43, 128826, 44]
    request = DecodeRequest(None, prompt, visual, 1)
    model = DeepseekOcrDecoder(net)
    model.setup_cache(1, 256)
    _, ours, _ = model.prefill(torch.tensor([0]), [request])
    with torch.no_grad():
        ids = torch.tensor([prompt])
        features = reference_vision.get_image_features(
            pixel_values=visual.global_view[None], pixel_values_local=visual.tiles,
            num_local_patches=[6], patches_grid=[list(visual.tiles_across_down)],
        ).pooler_output[0]
        embeds = reference_decoder.embed_tokens(ids)
        embeds = embeds.masked_scatter((ids == cfg.image_token_id)[..., None], features)
        hidden = reference_decoder(inputs_embeds=embeds).last_hidden_state
        reference = net.lm_head(hidden[:, -1]).float()
    assert_close(ours, reference)
