"""Shared fixtures: the project's shared real data, found beside the checkout."""

from __future__ import annotations

from pathlib import Path

import pytest

SHARED_DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"


def _shared(name: str) -> Path:
    path = SHARED_DATA / name
    if not path.is_dir():
        pytest.skip(f"shared data {path} not found (expected ../shared/data beside the checkout)")
    return path


@pytest.fixture(scope="session")
def olmocr_sample() -> Path:
    """olmOCR-Bench's sample bench with olmOCR's own outputs (olmocr_pipeline/)."""
    return _shared("olmocr-bench-sample")


@pytest.fixture(scope="session")
def pubtabnet_teds() -> Path:
    """PubTabNet's 20 TEDS golden pairs with the reference scores."""
    return _shared("pubtabnet-teds")
