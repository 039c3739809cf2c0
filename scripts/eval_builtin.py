"""Quality of the built-in model on pages it never saw, and its draft acceptance.

    python scripts/eval_builtin.py            # a table
    python scripts/eval_builtin.py --json

Sets (whole pages, CER and WER after normalising whitespace):
- `heldout_train_fonts`: synthetic pages from held-out text files (the training text split is
  by file), typeset in the training fonts and sizes, seeded apart from training;
- `heldout_unseen_fonts`: the same kind of pages in font families never used in training
  (FreeFont, C059, P052, URW Bookman/Gothic) at 14-15 px (small print, in training since the
  warm-started reader), 34-40 px (above the training range) and 18-30 px. Needs
  fonts-freefont-ttf and fonts-urw-base35; skipped without them;
- `heldout_handwriting_faces`: the same kind of pages from held-out text set in the training
  handwriting faces, in pen ink, on plain or ruled paper (`make_page(hand=1.0)`). Needs some of
  `synth.HAND_FONTS`; skipped without them;
- `samples`: `samples/` converted through the real renderer, against `ground_truth/`.
Acceptance is measured on the held-out training-font pages: per-depth conditional acceptance
with a fixed depth equal to the head's, and mean tokens per verify step with gated drafting.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import orjson
from rapidfuzz.distance import Levenshtein

from ocrcli.distributed.page_decoder import PageDecoder
from ocrcli.inputs import PageRef, collect
from ocrcli.models.identity import default_render_dpi
from ocrcli.models.registry import load_model, resolve_device
from ocrcli.render import PageImage, RenderSettings, render_page
from ocrcli.settings import ConvertSettings
from ocrcli.text_layer import DPI_KEY, rendered_dpi
from ocrcli.training.synth import available_fonts, hand_faces_installed, make_page
from ocrcli.training.text import TextSources, missing_word_list

REPO = Path(__file__).resolve().parents[1]


def normalise(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def error_rates(preds: list[str], refs: list[str]) -> dict:
    """CER and WER over all pages, and each page's CER and length in order (one page can
    carry most of a set's errors)."""
    preds, refs = [normalise(p) for p in preds], [normalise(r) for r in refs]
    errors = [Levenshtein.distance(p, r) for p, r in zip(preds, refs)]
    lengths = [len(r) for r in refs]
    words = sum(Levenshtein.distance(p.split(), r.split()) for p, r in zip(preds, refs))
    n_words = sum(len(r.split()) for r in refs)
    return {"pages": len(refs), "cer": round(sum(errors) / max(1, sum(lengths)), 5),
            "wer": round(words / max(1, n_words), 5),
            "page_cer": [round(e / max(1, n), 4) for e, n in zip(errors, lengths)],
            "page_chars": lengths}


def decode(loaded, images, draft_depth: int | None, batch: int = 16, dpi: float | None = None):
    """The images' records. `dpi`: each image is read as a PDF page rendered at that dpi
    (the layout reduces a finer one); None: as it comes (a rendered page carries its dpi)."""
    settings = ConvertSettings(inputs=[], out=Path("."), draft_depth=draft_depth, batch_size=batch)
    pages = []
    for i, img in enumerate(images):
        rgb = img.convert("RGB")
        if dpi is not None:
            rgb.info[DPI_KEY] = dpi
        pages.append(PageImage(PageRef(0, Path(f"page{i}"), "image", 1), rgb,
                               rendered_dpi(rgb) or 144.0))
    return PageDecoder(loaded, settings).decode(pages)


def synthetic(n: int, heldout_fonts: bool, sizes: tuple[int, int], seed: int, hand: float = 0.0):
    src = TextSources.load("test")
    pages = [make_page(800_000_000 + seed * 10_000 + i, src, heldout_fonts, sizes, hand=hand)
             for i in range(n)]
    return [p.image for p in pages], [p.markdown for p in pages]


def acceptance(records, depth: int) -> dict:
    hist: dict[int, int] = {}
    tokens = steps = 0
    for r in records:
        tokens += r.tokens
        steps += r.verify_steps
        for k, v in r.accepted_histogram.items():
            hist[int(k)] = hist.get(int(k), 0) + v
    per_depth = []
    for k in range(1, depth + 1):
        reached = sum(v for a, v in hist.items() if a >= k - 1)
        passed = sum(v for a, v in hist.items() if a >= k)
        per_depth.append(round(passed / reached, 4) if reached else None)
    return {"mean_accepted": round(tokens / max(1, steps), 3), "per_depth_acceptance": per_depth}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="builtin")
    ap.add_argument("--device", default="cpu", help="cpu, cuda, auto")
    ap.add_argument("--pages", type=int, default=30, help="synthetic pages per set")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    warning = missing_word_list()
    if warning:
        print(warning, file=sys.stderr)
    loaded = load_model(args.model, resolve_device(args.device))
    depth = loaded.model.max_draft_depth
    result: dict = {"model": loaded.model_id, "word_list": warning is None}

    images, truth = synthetic(args.pages, False, (18, 30), seed=1)
    fixed = decode(loaded, images, depth)
    gated = decode(loaded, images, None, batch=2)  # the default gate drafts to depth 6 here
    result["heldout_train_fonts"] = error_rates([r.text for r in gated], truth)
    result["acceptance_fixed_depth"] = {"depth": depth, **acceptance(fixed, depth)}
    result["acceptance_gated"] = acceptance(gated, depth)
    result["identical_fixed_vs_gated"] = [r.text for r in fixed] == [r.text for r in gated]

    if available_fonts(heldout=True):
        preds, refs = [], []
        for i, sizes in enumerate([(14, 15), (34, 40), (18, 30)]):
            imgs, md = synthetic(max(1, args.pages // 3), True, sizes, seed=10 + i)
            preds += [r.text for r in decode(loaded, imgs, None)]
            refs += md
        result["heldout_unseen_fonts"] = error_rates(preds, refs)
    else:
        result["heldout_unseen_fonts"] = "skipped: held-out fonts are not installed"

    if hand_faces_installed():
        imgs, md = synthetic(max(1, args.pages // 2), False, (18, 30), seed=20, hand=1.0)
        result["heldout_handwriting_faces"] = error_rates([r.text for r in decode(loaded, imgs, None)], md)
    else:
        result["heldout_handwriting_faces"] = "skipped: no handwriting face is installed"

    docs, _ = collect([str(REPO / "samples")])
    render = RenderSettings(dpi=default_render_dpi(args.model))  # as the converter renders
    preds, refs, names = [], [], []
    for i, doc in enumerate(docs):
        for p in doc.pages:
            img = render_page(PageRef(i, doc.path, doc.kind, p), render)
            truth_file = REPO / "ground_truth" / doc.path.stem / f"page-{p:04d}.md"
            preds.append(decode(loaded, [img.image], None)[0].text)
            refs.append(truth_file.read_text(encoding="utf-8"))
            names.append(f"{doc.rel}#{p}")
    result["samples"] = error_rates(preds, refs)
    result["samples"]["per_page_cer"] = {
        n: round(Levenshtein.distance(normalise(p), normalise(r)) / max(1, len(normalise(r))), 4)
        for n, p, r in zip(names, preds, refs)}

    if args.json:
        print(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode())
    else:
        for key in ("heldout_train_fonts", "heldout_unseen_fonts", "heldout_handwriting_faces",
                    "samples"):
            print(f"{key:22} {result[key]}")
        print(f"acceptance (K={depth}) {result['acceptance_fixed_depth']}")
        print(f"acceptance (gated)    {result['acceptance_gated']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
