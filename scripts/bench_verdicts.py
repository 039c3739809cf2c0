"""How often page verdicts (ocrcli/verdict.py) call a good page bad, and a bad page good.

    python scripts/bench_verdicts.py            # a table
    python scripts/bench_verdicts.py --json

Good pages: synthetic pages from the held-out text files (never trained on) in the training
fonts, and `samples/`. Bad pages: the same synthetic pages turned 90 and 180 degrees, and pages
of noise and of scattered shapes, which hold ink but no text. Each page goes through the real
page decoder (distributed/page_decoder.py) with its ink measured as the renderer measures it;
the table gives each set's statuses and the spread of the model's mean log-probability per
token, which is what `verdict.MIN_MEAN_LOGPROB` is chosen from.
"""

from __future__ import annotations

import argparse
import random
import sys
from collections import Counter
from pathlib import Path

import orjson
from PIL import Image, ImageDraw

from ocrcli.distributed.page_decoder import PageDecoder
from ocrcli.inputs import PageRef, collect
from ocrcli.models.identity import default_render_dpi
from ocrcli.models.registry import load_model, resolve_device
from ocrcli.render import PageImage, RenderSettings, ink_share, render_page
from ocrcli.settings import ConvertSettings
from ocrcli.training.synth import make_page
from ocrcli.training.text import TextSources

REPO = Path(__file__).resolve().parents[1]


def page_images(images: list[Image.Image]) -> list[PageImage]:
    return [PageImage(PageRef(0, Path(f"page{i}"), "image", 1), img.convert("RGB"), 144.0,
                      ink=ink_share(img)) for i, img in enumerate(images)]


def shapes_page(rng: random.Random, noise: bool) -> Image.Image:
    """Ink and no text: salt-and-pepper noise, or scattered circles and strokes."""
    img = Image.new("L", (800, 1000), 255)
    if noise:
        img.putdata([0 if rng.random() < 0.08 else 255 for _ in range(800 * 1000)])
        return img.convert("RGB")
    draw = ImageDraw.Draw(img)
    for _ in range(40):
        x, y, r = rng.randrange(740), rng.randrange(940), rng.randrange(10, 60)
        draw.ellipse([x, y, x + r, y + r], outline=0, width=3)
        draw.line([x, y, rng.randrange(800), rng.randrange(1000)], fill=0, width=2)
    return img.convert("RGB")


def sets(n: int, dpi: int) -> dict[str, tuple[bool, list[PageImage]]]:
    """Each set's name: (whether its pages are good, its pages)."""
    src = TextSources.load("test")
    synth = [make_page(900_000_000 + i, src, False, (18, 30)).image for i in range(n)]
    docs, _ = collect([str(REPO / "samples")])
    samples = [render_page(PageRef(i, d.path, d.kind, p), RenderSettings(dpi=dpi))
               for i, d in enumerate(docs) for p in d.pages]
    rng = random.Random(0)
    return {
        "heldout_synthetic": (True, page_images(synth)),
        "samples": (True, samples),
        "synthetic_rot90": (False, page_images([im.rotate(90, expand=True, fillcolor="white")
                                                for im in synth])),
        "synthetic_rot180": (False, page_images([im.rotate(180, fillcolor="white") for im in synth])),
        "noise_and_shapes": (False, page_images([shapes_page(rng, i % 2 == 0)
                                                 for i in range(max(2, n // 2))])),
    }


def summarise(good: bool, records) -> dict:
    statuses = Counter(r.status for r in records)
    logprobs = sorted(r.mean_logprob for r in records if r.mean_logprob is not None)
    wrong = sum(1 for r in records if (r.status == "ok") != good)
    return {"pages": len(records), "good": good, "statuses": dict(statuses),
            "wrong_verdicts": wrong,
            "mean_logprob_min_median_max": [logprobs[0], logprobs[len(logprobs) // 2], logprobs[-1]]
            if logprobs else None,
            "reasons": sorted({(r.error or "")[:60] for r in records if r.status != "ok"})}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="builtin")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--pages", type=int, default=12, help="synthetic pages per set")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    loaded = load_model(args.model, resolve_device(args.device))
    decoder = PageDecoder(loaded, ConvertSettings(inputs=[], out=Path(".")))
    result = {"model": loaded.model_id, "command": " ".join(["python", *sys.argv])}
    for name, (good, pages) in sets(args.pages, default_render_dpi(args.model)).items():
        result[name] = summarise(good, decoder.decode(pages))
    if args.json:
        print(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode())
        return 0
    for name, row in result.items():
        if isinstance(row, dict):
            print(f"{name:20} {'good' if row['good'] else 'bad ':4} wrong {row['wrong_verdicts']}/"
                  f"{row['pages']}  {row['statuses']}  logprob {row['mean_logprob_min_median_max']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
