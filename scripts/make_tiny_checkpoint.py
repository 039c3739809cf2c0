"""Write a tiny random DeepSeek-OCR / Jina-OCR-v1 checkpoint folder for tests.

    python scripts/make_tiny_checkpoint.py --arch jina-ocr-v1 OUT [--seed 0] [--shards 2]

OUT gets config.json, tokenizer.json and safetensors shards with the official tensor names
and structure (sharded with model.safetensors.index.json by default, like the release),
every dimension scaled down (ocrcli.models.deepseek_ocr.config.tiny_config), random weights
scaled so activations stay O(1). The vocabulary keeps its official size (129,280) so that
the byte-level BPE tokenizer's special tokens sit at their official ids (BOS 0, EOS 1,
pad 2, <image> 128815, ...); unused ids are filler tokens that no merge produces.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import torch
from safetensors.torch import save_file
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ocrcli.models.deepseek_ocr.adapter import (  # noqa: E402
    IMAGE_MARKER,
    default_instruction,
    prompt_template,
)
from ocrcli.models.deepseek_ocr.config import ARCHES, config_to_hf, tiny_config  # noqa: E402
from ocrcli.models.deepseek_ocr.model import DeepseekOcrForCausalLM  # noqa: E402
from ocrcli.models.deepseek_ocr.tokenizer import SPECIAL_TOKENS  # noqa: E402

# A little Markdown-like text, so the BPE merges are real (spaces, tags, digits).
CORPUS = [
    "# Results\n\nThe model reads the page and writes Markdown in reading order.",
    "| Name | Value |\n|---|---|\n| alpha | 0.25 |\n| beta | 1.50 |",
    "Table 2 shows the accuracy of the method on 1,403 pages of the benchmark.",
    "<table><tr><td>Total</td><td>42</td></tr></table>",
    "$$ E = m c^2 $$ and the inline formula $a + b = c$ are written in LaTeX.",
    "Convert the document to markdown. Transcribe the provided document image.",
]


def build_tokenizer(vocab_size: int) -> Tokenizer:
    """A byte-level BPE tokenizer with the official special ids and `vocab_size` entries."""
    by_id = sorted(SPECIAL_TOKENS.items(), key=lambda kv: kv[1])
    first = [t for t, i in by_id if i < 3]  # BOS, EOS, pad take ids 0..2
    trainer_tok = Tokenizer(models.BPE())
    trainer_tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(
        vocab_size=600,
        special_tokens=first,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    trainer_tok.train_from_iterator(CORPUS * 4, trainer=trainer)
    trained = json.loads(trainer_tok.to_str())["model"]
    vocab: dict[str, int] = dict(trained["vocab"])
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in trained["merges"]]
    specials = dict(by_id)
    if max(vocab.values()) >= min(i for i in specials.values() if i >= 3):
        raise ValueError("trained vocabulary overlaps the special ids")
    for token, token_id in specials.items():
        vocab[token] = token_id
    used = set(vocab.values())
    for token_id in range(vocab_size):
        if token_id not in used:
            vocab[f"<|filler_{token_id}|>"] = token_id

    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    # Registered as added tokens so that they are matched in raw text; they keep their ids.
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in specials])
    for token, token_id in specials.items():
        assert tok.token_to_id(token) == token_id, token
    assert tok.get_vocab_size() == vocab_size
    return tok


@torch.no_grad()
def randomize(net: torch.nn.Module, generator: torch.Generator) -> None:
    """Random weights that keep every stage's activations O(1)."""
    for name, p in net.named_parameters():
        noise = torch.randn(p.shape, generator=generator)
        if name.endswith(".bias"):
            p.copy_(0.02 * noise)
        elif p.dim() == 1 and name.endswith(".weight"):  # RMSNorm / LayerNorm scales
            p.copy_(1.0 + 0.1 * noise)
        elif p.dim() == 1:  # class_embedding, image_newline, view_seperator
            p.copy_(noise)
        elif "embed_tokens" in name:
            p.copy_(noise)
        elif "pos_embed" in name or "position_embedding" in name or "rel_pos" in name:
            p.copy_(0.5 * noise)
        else:  # linear and conv weights
            p.copy_(noise / math.sqrt(math.prod(p.shape[1:])))


@torch.no_grad()
def make_draftable(
    net: DeepseekOcrForCausalLM,
    tokenizer: Tokenizer,
    generator: torch.Generator,
    mix: float = 1.0,
    eos_after: int = 40,
) -> None:
    """Reshape random weights so that drafts get accepted, for end-to-end tests of speculation.

    A random head almost never guesses the main model's next token, so multi-token
    acceptance would go untested. Here the next token is mostly a function of the current
    one: the LM head maps a token's embedding to its successor in a random cycle through the
    printable BPE tokens, and the prompt's last token leads into the cycle, which reaches EOS
    after `eos_after` tokens. The residual branches (attention and MLP outputs, the head's
    hidden input) keep their random weights, scaled by `mix`, so the context and the image
    still move the logits: pages differ, some drafts are rejected, some pages miss the EOS
    (measured with mix 1 on samples/: 2.5-3.2 tokens per verify step at depth 3; with 0.5
    every page gives the same text and every draft is accepted). The MTP head passes the
    token embedding through `eh_proj`, so it predicts the same successor.
    """
    cfg = net.config
    embed = net.model.embed_tokens.weight  # [V,d], N(0,1)
    d = embed.shape[1]
    last_prompt_ids = set()
    for arch in ARCHES:
        prompt, _ = prompt_template(arch, default_instruction(arch))
        last_prompt_ids.add(tokenizer.encode(prompt.partition(IMAGE_MARKER)[2]).ids[-1])
    printable = [
        i for i in range(3, 600)
        if i not in last_prompt_ids and (s := tokenizer.decode([i])).isascii() and s.isprintable()
        and not s.startswith("<|filler")  # ids the trained BPE did not fill
    ]
    cycle = [printable[i] for i in torch.randperm(len(printable), generator=generator)]
    successor = {a: b for a, b in zip(cycle, cycle[1:] + cycle[:1])}
    successor[cycle[eos_after - 1]] = cfg.eos_id
    successor.update({i: cycle[0] for i in last_prompt_ids})
    head = net.lm_head.weight  # [V,d]
    head.mul_(0.05)  # tokens outside the cycle stay unlikely
    for token, nxt in successor.items():
        head[nxt] = embed[token] / embed[token].norm()
    for name, p in net.named_parameters():
        if name.endswith(("o_proj.weight", "down_proj.weight")):
            p.mul_(mix)
    if net.mtp_module is not None:
        for mtp in net.mtp_module.heads:
            w = mtp.eh_proj.weight  # [d, 2d]
            w.mul_(mix)
            embed_half = slice(0, d) if cfg.mtp.concat_order == "embed_hidden" else slice(d, 2 * d)
            w[:, embed_half] += torch.eye(d)


def write_tiny_checkpoint(
    out: str | Path,
    arch: str,
    seed: int = 0,
    shards: int = 1,
    index: bool = True,
    duplicates: bool = False,
    dtype: torch.dtype = torch.float32,
    draftable: bool = False,
    full_structure: bool = False,
) -> Path:
    """Write the folder and return its path. `duplicates` adds the MTP duplicate tensors
    some Jina revisions carry (mtp_embed_tokens, shared_head.*) to exercise the loader;
    `draftable` shapes the weights so drafts get accepted (see make_draftable);
    `full_structure` keeps the real decoder's 12 layers and 64 experts at tiny width."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    cfg = tiny_config(arch, full_structure)
    generator = torch.Generator().manual_seed(seed)
    net = DeepseekOcrForCausalLM(cfg)
    randomize(net, generator)
    tokenizer = build_tokenizer(cfg.decoder.vocab_size)
    if draftable:
        make_draftable(net, tokenizer, generator)
    state = {k: v.detach().to(dtype).contiguous().clone() for k, v in net.state_dict().items()}
    if duplicates and cfg.mtp is not None:
        state["mtp_embed_tokens.weight"] = state["model.embed_tokens.weight"].clone()
        state["mtp_module.heads.0.shared_head.norm.weight"] = state["model.norm.weight"].clone()
        state["mtp_module.heads.0.shared_head.local_head.weight"] = state["lm_head.weight"].clone()

    names = sorted(state)
    if index:
        shard_names = [f"model-{i + 1:05d}-of-{shards:05d}.safetensors" for i in range(shards)]
        weight_map = {name: shard_names[i % shards] for i, name in enumerate(names)}
        for shard in shard_names:
            part = {n: state[n] for n in names if weight_map[n] == shard}
            save_file(part, str(out / shard), metadata={"format": "pt"})
        total = sum(t.numel() * t.element_size() for t in state.values())
        index_json = {"metadata": {"total_size": total}, "weight_map": weight_map}
        (out / "model.safetensors.index.json").write_text(json.dumps(index_json, indent=2))
    else:
        save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})

    config = config_to_hf(cfg)
    config["torch_dtype"] = str(dtype).removeprefix("torch.")
    (out / "config.json").write_text(json.dumps(config, indent=2))
    tokenizer.save(str(out / "tokenizer.json"))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", choices=ARCHES, required=True)
    parser.add_argument("out", help="output folder (created)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--shards", type=int, default=1)
    parser.add_argument("--no-index", action="store_true", help="one model.safetensors, no index")
    parser.add_argument("--duplicates", action="store_true", help="add Jina's MTP duplicates")
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    parser.add_argument("--draftable", action="store_true",
                        help="weights whose drafts get accepted (tests of speculation)")
    parser.add_argument("--full-structure", action="store_true",
                        help="the real decoder's layers and experts at tiny width (op counts)")
    args = parser.parse_args()
    out = write_tiny_checkpoint(
        args.out, args.arch, seed=args.seed, shards=args.shards, index=not args.no_index,
        duplicates=args.duplicates, dtype=getattr(torch, args.dtype), draftable=args.draftable,
        full_structure=args.full_structure,
    )
    print(f"wrote {args.arch} tiny checkpoint to {out}")


if __name__ == "__main__":
    main()
