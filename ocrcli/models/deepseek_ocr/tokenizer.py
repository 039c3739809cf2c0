"""DeepSeek-OCR's byte-level BPE tokenizer, read from tokenizer.json by `tokenizers`."""

from __future__ import annotations

from pathlib import Path

from tokenizers import Tokenizer

# Official ids, as both checkpoints' tokenizer.json assign them.
SPECIAL_TOKENS = {
    "<｜begin▁of▁sentence｜>": 0,
    "<｜end▁of▁sentence｜>": 1,
    "<｜▁pad▁｜>": 2,
    "<image>": 128815,
    "<|ref|>": 128816,
    "<|/ref|>": 128817,
    "<|det|>": 128818,
    "<|/det|>": 128819,
    "<|grounding|>": 128820,
    "<td>": 128821,
    "</td>": 128822,
    "<tr>": 128823,
    "</tr>": 128824,
    "<|User|>": 128825,
    "<|Assistant|>": 128826,
}


class OcrTokenizer:
    """encode() without BOS/EOS (added tokens such as <|grounding|> still map to their ids);
    decode() drops BOS, EOS and pad but keeps the grounding tags the post-processing reads."""

    def __init__(self, tokenizer: Tokenizer, bos_id: int = 0, eos_id: int = 1, pad_id: int = 2):
        self._tok = tokenizer
        self.bos_id, self.eos_id, self.pad_id = bos_id, eos_id, pad_id
        self._dropped = {bos_id, eos_id, pad_id}

    @classmethod
    def from_file(cls, path: str | Path, **ids: int) -> OcrTokenizer:
        return cls(Tokenizer.from_file(str(path)), **ids)

    @property
    def vocab_size(self) -> int:
        return self._tok.get_vocab_size(with_added_tokens=True)

    def token_to_id(self, token: str) -> int | None:
        return self._tok.token_to_id(token)

    def encode(self, text: str) -> list[int]:
        return self._tok.encode(text, add_special_tokens=False).ids

    def decode(self, ids: list[int]) -> str:
        kept = [i for i in ids if i not in self._dropped]
        return self._tok.decode(kept, skip_special_tokens=False)
