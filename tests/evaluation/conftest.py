"""Fixtures for the real documents the scorer is checked on (see tests/conftest.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import real_data


@pytest.fixture
def olmocr_sample() -> Path:
    """olmOCR-Bench's sample bench with olmOCR's own outputs (olmocr_pipeline/)."""
    return real_data("olmocr-bench-sample")


@pytest.fixture
def pubtabnet_teds() -> Path:
    """PubTabNet's 20 TEDS golden pairs with the reference scores."""
    return real_data("pubtabnet-teds")
