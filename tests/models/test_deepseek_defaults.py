"""`ocrcli convert --model <tiny checkpoint>` with default options, on checkpoints that keep
the decoder's real `max_position_embeddings`: the default token cap (8192) plus the prompt
is more than the model's positions, so the engine must fit the cache to the model and end a
request that runs out of positions as `truncated`, never refuse to start."""

from __future__ import annotations

import json

import pytest

from ocrcli.models.deepseek_ocr import DEEPSEEK_OCR, JINA_OCR_V1
from ocrcli.testing.model_folders import tiny_checkpoint_writer
from tests.conftest import SAMPLES, run_cli


@pytest.mark.parametrize("arch", [DEEPSEEK_OCR, JINA_OCR_V1])
def test_default_options_convert_every_page(arch, tmp_path):
    folder = tiny_checkpoint_writer()(tmp_path / "model", arch, seed=5, index=False, draftable=True)
    config = json.loads((folder / "config.json").read_text())
    language = config.get("language_config", config)
    language["max_position_embeddings"] = 8192  # DeepSeek-OCR's; Jina-OCR-v1 ships more
    (folder / "config.json").write_text(json.dumps(config))
    out = tmp_path / "out"
    # random weights read noise: their pages are flagged, which is not what is tested here
    done = run_cli("convert", str(SAMPLES / "memo.jpg"), "-o", str(out), "--model", str(folder),
                   "--accept", "truncated,degenerate")
    assert done.returncode in (0, 1), done.stderr
    assert "Traceback" not in done.stderr
    page = json.loads((out / "memo.jpg" / "page-0001.json").read_text())
    assert page["status"] in ("ok", "truncated", "degenerate")
    if page["status"] == "truncated":  # the prompt leaves under 8192 positions: never the cap
        assert "the model's last position before the token cap of 8192" in page["error"]
    assert (out / "memo.jpg" / "page-0001.md").exists()
