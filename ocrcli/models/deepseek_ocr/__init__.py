"""Native PyTorch DeepSeek-OCR and Jina-OCR-v1 (DeepEncoder + DeepSeek-V2 MoE decoder +
Jina's FastMTP draft head), loaded from the official safetensors by tensor name."""

from .config import (
    DEEPSEEK_OCR,
    JINA_OCR_V1,
    DeepseekOcrConfig,
    MtpConfig,
    full_config,
    tiny_config,
)
from .loading import ModelLoadError, load
from .model import DeepseekOcrForCausalLM
from .runtime import DeepseekOcrDecoder

__all__ = [
    "DEEPSEEK_OCR",
    "JINA_OCR_V1",
    "DeepseekOcrConfig",
    "DeepseekOcrDecoder",
    "DeepseekOcrForCausalLM",
    "ModelLoadError",
    "MtpConfig",
    "full_config",
    "load",
    "tiny_config",
]
