"""`--device` values, checked without importing torch: a typo must cost a usage error, not
seconds of loading and a list of torch's internal device types."""

from __future__ import annotations

import re

from ocrcli.errors import UsageError

DEVICE_CHOICES = "auto, cpu, cuda, cuda:N, mps"
_DEVICE = re.compile(r"auto|cpu|cuda(:\d+)?|mps")


def check_device(device: str) -> str:
    """The `--device` value, or a UsageError naming the values ocrcli accepts."""
    if not _DEVICE.fullmatch(device):
        raise UsageError(f"--device must be one of {DEVICE_CHOICES} (got {device!r})")
    return device
