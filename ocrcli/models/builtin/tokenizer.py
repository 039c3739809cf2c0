"""The built-in model's character tokenizer, stored as `tokenizer.json` beside the weights."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

SPECIALS = ("<pad>", "<s>", "</s>", "<unk>")
PAD_ID, BOS_ID, EOS_ID, UNK_ID = range(4)

# English, Latin-1 letters and punctuation, and common typographic punctuation.
DEFAULT_CHARS = (
    "".join(chr(c) for c in range(32, 127))
    + "".join(chr(c) for c in range(0xA1, 0x100) if c != 0xAD)
    + "\u2018\u2019\u201a\u201c\u201d\u201e\u2013\u2014\u2022\u2026\u2020\u2021\u2032\u2033"
    + "\u20ac\u2122\u2212\u2190\u2192\u2264\u2265\u2260"
)


@dataclass(frozen=True)
class CharTokenizer:
    chars: str

    @property
    def vocab_size(self) -> int:
        return len(SPECIALS) + len(self.chars)

    @property
    def _index(self) -> dict[str, int]:
        return {c: i + len(SPECIALS) for i, c in enumerate(self.chars)}

    def encode(self, text: str) -> list[int]:
        index = self._index
        return [index.get(c, UNK_ID) for c in text]

    def decode(self, ids: list[int]) -> str:
        n = len(SPECIALS)
        return "".join(self.chars[i - n] for i in ids if n <= i < n + len(self.chars))

    def save(self, path: Path) -> None:
        data = {"type": "ocrcli-char", "specials": list(SPECIALS), "chars": self.chars}
        path.write_text(json.dumps(data, ensure_ascii=False, indent=1), encoding="utf-8")

    @classmethod
    def load(cls, path: Path) -> CharTokenizer:
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("type") != "ocrcli-char" or list(data.get("specials", [])) != list(SPECIALS):
            raise ValueError(f"{path} is not an ocrcli character tokenizer")
        return cls(data["chars"])
