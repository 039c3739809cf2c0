"""A run's model: loading it under the run's settings, its token cap, its draft policy and the
engine that decodes with it. `convert`, the Ray workers and the benchmarks build them here, so
that every path decodes the same way."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ocrcli.engine.policy import Drafter, DraftPolicy, default_policy
from ocrcli.errors import ModelLoadError, one_line
from ocrcli.settings import ConvertSettings

if TYPE_CHECKING:  # torch loads only when a page is to be decoded
    from ocrcli.engine.scheduler import Engine
    from ocrcli.models.base import LoadedModel


def load_for_run(s: ConvertSettings, device: str) -> LoadedModel:
    """`--model` on `device` (a `--device` value), with its image mode and prompt."""
    import torch

    from ocrcli.models.registry import load_model, resolve_device

    # The loaders raise ModelLoadError for what a model folder can get wrong (a missing
    # tensor, a bad config, no network); what the machine can get wrong is wrapped here.
    # Anything else is a bug in ocrcli: it is reported as one (exit 15), not as exit 3.
    device_errors = (torch.OutOfMemoryError, getattr(torch, "AcceleratorError", OSError))
    try:
        loaded = load_model(s.model, resolve_device(device), s.mode, s.prompt)
    except device_errors as exc:
        raise ModelLoadError(f"cannot load --model {s.model} onto the device: "
                             f"{type(exc).__name__}: {one_line(exc)}") from None
    except OSError as exc:  # its files cannot be read (permissions, I/O errors)
        raise ModelLoadError(f"cannot load --model {s.model}: {one_line(exc)}") from None
    if not s.rereads and hasattr(loaded.adapter, "reread_below"):  # models that reread
        loaded.adapter.reread_below = float("-inf")
    return loaded


def max_new_tokens(s: ConvertSettings, model_default: int) -> int:
    """The token cap per request: the option, else the model's default (`ModelSpec`). The
    engine lowers it further for a request whose prompt leaves fewer cache positions."""
    return s.max_new_tokens or model_default


def draft_policy(head_depth: int, s: ConvertSettings) -> DraftPolicy:
    """Gated drafting up to the head's depth by default; a fixed depth when one is given."""
    if s.draft_depth is None:
        return default_policy(head_depth, s.batch_size, s.min_prob, s.min_path_prob)
    return DraftPolicy(s.draft_depth)


def make_engine(loaded: LoadedModel, s: ConvertSettings, max_new: int,
                policy: DraftPolicy | None = None, proposer=None, exact: bool | None = None,
                drafter: Drafter | str | None = None) -> Engine:
    """The engine for a loaded model under these settings (benchmarks may give their own
    draft policy, proposer, kernel choice and drafter)."""
    from ocrcli.engine.capture import CaptureSettings
    from ocrcli.engine.scheduler import Engine

    # The caches are sized from the model's spec: its prompt bound (a full-page model's prompt
    # holds hundreds of <image> slots) and its positions.
    policy = policy or draft_policy(loaded.model.spec.max_draft_depth, s)
    on_cuda = loaded.model.spec.device.type == "cuda"
    capture = CaptureSettings() if s.cuda_graphs and on_cuda and not exact else None
    drafter = Drafter(drafter or s.drafter)
    if s.draft_depth == 0 and drafter == Drafter.AUTO:
        drafter = Drafter.NONE  # --draft-depth 0 stays plain greedy
    return Engine(loaded.model, s.batch_size, max_new, policy, loaded.guard, proposer=proposer,
                  exact=exact, capture=capture, faults=s.faults, drafter=drafter)
