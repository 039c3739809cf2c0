"""Our module tree against the official tensor inventories (the release's safetensors
headers: 2,710 tensors, and the 12 of Jina's `mtp_module.heads.0`).

Both full-size models are built on the meta device (no weights allocated). The inventories
in fixtures/ are written by fixtures/make_deepseek_tensor_inventory.py, a transcription of
the published key patterns and shapes that shares no code with ocrcli.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
import torch

from ocrcli.models.deepseek_ocr.config import (
    DEEPSEEK_OCR,
    JINA_OCR_V1,
    config_from_hf,
    config_to_hf,
    full_config,
    tiny_config,
)
from ocrcli.models.deepseek_ocr.model import DeepseekOcrForCausalLM

FIXTURES = Path(__file__).parent / "fixtures"
# 6,672,212,480 bytes of BF16 in the release (its one safetensors shard), 2 bytes per parameter.
DEEPSEEK_OCR_PARAMS = 6_672_212_480 // 2


def inventory(arch: str) -> dict[str, tuple[int, ...]]:
    table = json.loads((FIXTURES / "deepseek_ocr_tensors.json").read_text())
    if arch == JINA_OCR_V1:
        table.update(json.loads((FIXTURES / "jina_ocr_v1_mtp_tensors.json").read_text()))
    return {name: tuple(shape) for name, shape in table.items()}


def meta_state(arch: str, tiny: bool = False) -> dict[str, tuple[int, ...]]:
    cfg = tiny_config(arch) if tiny else full_config(arch)
    with torch.device("meta"):
        net = DeepseekOcrForCausalLM(cfg)
    return {name: tuple(t.shape) for name, t in net.state_dict().items()}


@pytest.fixture(scope="module", params=[DEEPSEEK_OCR, JINA_OCR_V1])
def arch_and_state(request):
    return request.param, meta_state(request.param)


def test_fixture_counts():
    assert len(inventory(DEEPSEEK_OCR)) == 2710
    assert len(inventory(JINA_OCR_V1)) == 2722


def test_every_official_tensor_maps_to_our_tree(arch_and_state):
    arch, ours = arch_and_state
    official = inventory(arch)
    missing = sorted(set(official) - set(ours))
    unexpected = sorted(set(ours) - set(official))
    assert not missing, f"{len(missing)} official tensors missing, e.g. {missing[:5]}"
    assert not unexpected, f"{len(unexpected)} unexpected tensors, e.g. {unexpected[:5]}"
    wrong = {n: (ours[n], s) for n, s in official.items() if ours[n] != s}
    assert not wrong, f"shape mismatches (ours, official): {dict(list(wrong.items())[:5])}"


def test_parameter_counts(arch_and_state):
    arch, ours = arch_and_state
    total = sum(math.prod(s) for s in ours.values())
    mtp = sum(math.prod(s) for n, s in ours.items() if n.startswith("mtp_module."))
    base = total - mtp
    assert abs(base - 3.336e9) / 3.336e9 < 1e-3
    assert base == DEEPSEEK_OCR_PARAMS  # exact, from the release's byte count
    if arch == JINA_OCR_V1:
        assert 35e6 < mtp < 37e6  # ≈36 M (Jina's 12 `mtp_module` tensors)
    else:
        assert mtp == 0


def _pattern(name: str) -> str:
    return re.sub(r"\.\d+\.", ".N.", name)


@pytest.mark.parametrize("arch", [DEEPSEEK_OCR, JINA_OCR_V1])
def test_tiny_config_has_the_official_structure(arch):
    """The tiny model only scales dimensions: same names up to layer/expert indices."""
    tiny = meta_state(arch, tiny=True)
    assert {_pattern(n) for n in tiny} == {_pattern(n) for n in inventory(arch)}
    assert tiny["model.embed_tokens.weight"][0] == 129280  # special ids stay official
    assert all(n[0] <= 129280 for n in tiny.values())


@pytest.mark.parametrize("arch", [DEEPSEEK_OCR, JINA_OCR_V1])
def test_config_json_round_trip(arch):
    for cfg in (full_config(arch), tiny_config(arch)):
        assert config_from_hf(json.loads(json.dumps(config_to_hf(cfg)))) == cfg


def test_official_style_config_json():
    """What the release's config.json gives (no implicit sizes, no rope_theta for DeepSeek)."""
    lang = {
        "vocab_size": 129280, "hidden_size": 1280, "num_hidden_layers": 12,
        "num_attention_heads": 10, "num_key_value_heads": 10, "intermediate_size": 6848,
        "moe_intermediate_size": 896, "first_k_dense_replace": 1, "n_routed_experts": 64,
        "num_experts_per_tok": 6, "n_shared_experts": 2, "n_group": 1, "topk_group": 1,
        "topk_method": "greedy", "use_mla": False, "kv_lora_rank": None, "q_lora_rank": None,
        "max_position_embeddings": 8192, "bos_token_id": 0, "eos_token_id": 1,
    }
    raw = {
        "model_type": "deepseek_vl_v2",
        "language_config": lang,
        "projector_config": {"input_dim": 2048, "n_embed": 1280, "projector_type": "linear"},
        "vision_config": {
            "width": {
                "sam_vit_b": {"width": 768, "layers": 12, "heads": 12,
                              "global_attn_indexes": [2, 5, 8, 11],
                              "downsample_channels": [512, 1024]},
                "clip-l-14-224": {"width": 1024, "layers": 24, "heads": 16, "patch_size": 14,
                                  "image_size": 224},
            }
        },
        **lang,
    }
    assert config_from_hf(raw) == full_config(DEEPSEEK_OCR)
    jina = {
        **raw, "rope_theta": 1_000_000.0, "max_position_embeddings": 32768,
        "num_nextn_predict_layers": 1, "mtp_num_heads": 1, "mtp_num_speculative_steps": 3,
        "mtp_recursive": True, "mtp_moe": False, "image_token_index": 128815,
    }
    cfg = config_from_hf(jina)
    assert cfg == full_config(JINA_OCR_V1)
    assert cfg.decoder.rope_theta == 1e6  # 1e4 for Jina fails silently (its config.json sets it)
