"""Load DeepSeek-OCR / Jina-OCR-v1 from a local folder or a Hugging Face Hub id.

Only config.json, tokenizer.json and *.safetensors are read: no pickle, no remote code.
Everything is checked before any page is read: the config describes an architecture this
package implements, every tensor our module tree needs is present with its official shape,
and nothing unexpected is there (except known duplicates, which are ignored). A problem
raises ModelLoadError with a one-line message naming it.
"""

from __future__ import annotations

import hashlib
import json
import struct
from dataclasses import replace
from pathlib import Path

import torch
from safetensors import safe_open

from ...errors import ModelLoadError, UsageError
from ..base import LoadedModel
from .adapter import DeepseekOcrPageAdapter, default_guard
from .config import DeepseekOcrConfig, MtpConfig, config_from_hf
from .model import DeepseekOcrForCausalLM
from .preprocess import MODES
from .runtime import DeepseekOcrDecoder
from .tokenizer import OcrTokenizer

HUB_ALLOW_PATTERNS = ["*.json", "*.safetensors"]

# ModelLoadError (re-exported here) is the CLI's own: exit code 3 and its one-line message,
# whoever calls the loader. Its str() names the problem.
__all__ = ["HUB_ALLOW_PATTERNS", "ModelLoadError", "load"]


def is_ignored_tensor(name: str) -> bool:
    """Tensors some revisions carry that we accept and drop: MTP duplicates of the main
    embedding / norm / LM head (mtp_share_* is true), and rotary caches."""
    return (
        name == "mtp_embed_tokens.weight"
        or ".shared_head." in name
        or name.endswith("rotary_emb.inv_freq")
    )


# --------------------------------------------------------------------------- the folder


def resolve_folder(path_or_id: str) -> Path:
    """A local folder as is; an `owner/name[@revision]` Hub id downloaded (json and
    safetensors only) when the Hub or the local HF cache has it."""
    path = Path(path_or_id).expanduser()
    if path.is_dir():
        return path
    looks_like_id = path_or_id.count("/") == 1 and not path_or_id.startswith((".", "/", "~"))
    if not looks_like_id:
        raise ModelLoadError(f"model folder {path_or_id} does not exist")
    repo_id, _, revision = path_or_id.partition("@")
    try:
        from huggingface_hub import snapshot_download
    except ImportError as err:
        raise ModelLoadError(
            f"cannot fetch {repo_id}: huggingface_hub is not installed; pass a local folder"
        ) from err
    try:
        folder = snapshot_download(
            repo_id, revision=revision or None, allow_patterns=HUB_ALLOW_PATTERNS
        )
    except Exception as err:  # offline, unknown repo, gated, ...: all mean the same here
        raise ModelLoadError(
            f"cannot fetch {repo_id} from the Hugging Face Hub ({type(err).__name__}); "
            "pass a local folder with config.json, tokenizer.json and *.safetensors"
        ) from err
    return Path(folder)


def shard_files(folder: Path) -> list[Path]:
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text())["weight_map"]
        except (ValueError, KeyError) as err:
            raise ModelLoadError(f"{index} is not a safetensors index ({err})") from err
        shards = sorted({folder / name for name in weight_map.values()})
        for shard in shards:
            if not shard.is_file():
                raise ModelLoadError(f"{index} names {shard.name}, which is missing")
        return shards
    shards = sorted(folder.glob("*.safetensors"))
    if not shards:
        raise ModelLoadError(
            f"model folder {folder} has no *.safetensors weights (pickle checkpoints are not read)"
        )
    return shards


def read_config(folder: Path) -> DeepseekOcrConfig:
    path = folder / "config.json"
    if not path.is_file():
        raise ModelLoadError(f"model folder {folder} has no config.json")
    try:
        return config_from_hf(json.loads(path.read_text()))
    except (ValueError, TypeError, KeyError) as err:  # ConfigError is a ValueError
        raise ModelLoadError(f"{path}: {err}".replace("\n", " ")) from err


def checkpoint_shapes(shards: list[Path]) -> dict[str, tuple[tuple[int, ...], Path]]:
    """name -> (shape, shard) from the safetensors headers alone (no tensor data read)."""
    found: dict[str, tuple[tuple[int, ...], Path]] = {}
    for shard in shards:
        try:
            with safe_open(str(shard), framework="pt") as f:
                for name in f.keys():
                    found[name] = (tuple(f.get_slice(name).get_shape()), shard)
        except Exception as err:
            raise ModelLoadError(f"{shard} is not a readable safetensors file ({err})") from err
    return found


def check_tensors(
    expected: dict[str, tuple[int, ...]], found: dict[str, tuple[tuple[int, ...], Path]], arch: str
) -> None:
    missing = [n for n in expected if n not in found]
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise ModelLoadError(f"checkpoint is missing tensor {missing[0]}{more} for {arch}")
    for name, shape in expected.items():
        got, shard = found[name]
        if got != shape:
            raise ModelLoadError(
                f"tensor {name} in {shard.name} has shape {list(got)}, expected {list(shape)}"
            )
    unexpected = [n for n in found if n not in expected and not is_ignored_tensor(n)]
    if unexpected:
        more = f" (and {len(unexpected) - 1} more)" if len(unexpected) > 1 else ""
        raise ModelLoadError(f"checkpoint has unexpected tensor {unexpected[0]}{more} for {arch}")


def weights_fingerprint(folder: Path, shards: list[Path]) -> str:
    """Hash of config.json, tokenizer.json and each shard's size and safetensors header
    (names, dtypes, offsets), plus a sample of its data: cheap for 6.7 GB, and it changes
    when the weights are re-exported or swapped."""
    digest = hashlib.sha256()
    for name in ("config.json", "tokenizer.json"):
        digest.update((folder / name).read_bytes())
    for shard in shards:
        size = shard.stat().st_size
        with shard.open("rb") as f:
            header_len = struct.unpack("<Q", f.read(8))[0]
            digest.update(f"{shard.name}:{size}".encode())
            digest.update(f.read(header_len))
            f.seek(max(8 + header_len, size // 2))
            digest.update(f.read(1 << 16))
    return digest.hexdigest()[:16]


def load_weights(
    net: DeepseekOcrForCausalLM, shards: list[Path], device: str | torch.device, dtype: torch.dtype
) -> None:
    expected = net.state_dict().keys()
    state = {}
    for shard in shards:
        with safe_open(str(shard), framework="pt", device="cpu") as f:
            for name in f.keys():
                if name in expected:
                    state[name] = f.get_tensor(name).to(device=device, dtype=dtype)
    net.load_state_dict(state, strict=True, assign=True)


# ------------------------------------------------------------------------------- entry


def load(
    path_or_id: str,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.bfloat16,
    *,
    mode: str = "gundam",
    mtp: MtpConfig | None = None,
    instruction: str | None = None,
) -> LoadedModel:
    """Load a checkpoint into a LoadedModel for the engine.

    `mode` is the image mode (tiny, small, base, large, gundam, gundam-m); `mtp` overrides
    the draft head's switches (concat order, target tap) for Jina-OCR-v1; `instruction`
    replaces the model's default instruction (`--prompt`).
    """
    if mode not in MODES:  # the caller's mistake, not the checkpoint's: a usage error
        raise UsageError(f"unknown image mode {mode!r}; use one of {', '.join(MODES)}")
    folder = resolve_folder(path_or_id)
    cfg = read_config(folder)
    if mtp is not None and cfg.mtp is not None:
        cfg = replace(cfg, mtp=mtp)
    tokenizer_path = folder / "tokenizer.json"
    if not tokenizer_path.is_file():
        raise ModelLoadError(f"model folder {folder} has no tokenizer.json")
    try:
        tokenizer = OcrTokenizer.from_file(
            tokenizer_path, bos_id=cfg.bos_id, eos_id=cfg.eos_id, pad_id=cfg.pad_id
        )
    except Exception as err:
        raise ModelLoadError(f"{tokenizer_path} cannot be read ({err})".replace("\n", " ")) from err
    image_id = tokenizer.token_to_id("<image>")
    if image_id != cfg.image_token_id:
        raise ModelLoadError(
            f"{tokenizer_path}: <image> has id {image_id}, the model expects {cfg.image_token_id}"
        )
    shards = shard_files(folder)
    with torch.device("meta"):
        net = DeepseekOcrForCausalLM(cfg)
    expected = {name: tuple(t.shape) for name, t in net.state_dict().items()}
    check_tensors(expected, checkpoint_shapes(shards), cfg.arch)
    load_weights(net, shards, device, dtype)
    adapter = DeepseekOcrPageAdapter(tokenizer, cfg, mode=MODES[mode], instruction=instruction or "")
    decoder = DeepseekOcrDecoder(net, prompt_bound=adapter.max_prompt_tokens)
    return LoadedModel(
        model_id=path_or_id if not Path(path_or_id).is_dir() else str(folder.resolve()),
        weights_hash=weights_fingerprint(folder, shards),
        model=decoder,
        tokenizer=tokenizer,
        adapter=adapter,
        guard=default_guard(cfg.arch),
        prompt=adapter.instruction,
    )
