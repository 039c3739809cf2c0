"""Rendering-based equivalence of LaTeX equations, as olmOCR-Bench's math tests use.

Two equations are judged equivalent when KaTeX renders them to the same thing:
either the reference's MathML appears inside the candidate's, or every glyph of
the reference can be paired with an identical candidate glyph whose
neighbours (above, below, left, right) pair up consistently too. The second
criterion accepts differently written LaTeX that draws the same symbols in the
same arrangement.

Rendering needs KaTeX in a headless Chromium driven by Playwright. Neither is
a dependency of ocrcli: :func:`open_katex_renderer` raises
:class:`RendererUnavailable` when something is missing, and the scorer then
reports the math tests it cannot decide as skipped.
"""

from __future__ import annotations

import importlib.util
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

# Glyph centres within this many CSS pixels count as vertically/horizontally
# aligned when finding neighbours (the official scorer's tolerance at 24 px).
ALIGN_TOLERANCE_PX = 5.0
FONT_SIZE_PX = 24
_VIEWPORT = {"width": 800, "height": 400}
_ZERO_WIDTH_SPACE = "\u200b"


@dataclass(frozen=True)
class Glyph:
    """A piece of rendered text and its box, in CSS pixels."""

    text: str
    x: float
    y: float
    width: float
    height: float

    @property
    def center(self) -> tuple[float, float]:
        return self.x + self.width / 2, self.y + self.height / 2


@dataclass(frozen=True)
class RenderedEquation:
    """KaTeX's MathML for an equation and the boxes of its innermost visible spans."""

    mathml: str
    glyphs: tuple[Glyph, ...]


class EquationRenderer(Protocol):
    """Anything that renders LaTeX the way KaTeX does (a fake one in tests)."""

    def render(self, latex: str) -> RenderedEquation | None:
        """The rendering, or ``None`` when the LaTeX does not render."""
        ...


class RendererUnavailable(RuntimeError):
    """KaTeX rendering cannot run here; the message says what is missing."""


# --- comparison --------------------------------------------------------------

_SEMANTICS = re.compile(r"<semantics>(.*)</semantics>", re.DOTALL)
_ANNOTATION = re.compile(r"<annotation\b.*?</annotation>", re.DOTALL)
# Chromium serialises U+00A0 as &nbsp;; it is whitespace and is dropped like it.
_BLANK = re.compile(r"\s+|&nbsp;")


def mathml_core(mathml: str) -> str:
    """The presentation MathML without the TeX annotation and without whitespace."""
    match = _SEMANTICS.search(mathml)
    core = _ANNOTATION.sub("", match.group(1)) if match else mathml
    return _BLANK.sub("", core)


def _split_glyphs(glyphs: tuple[Glyph, ...]) -> list[Glyph]:
    # A span may hold several characters; give each an equal slice of the box so
    # that characters, not spans, are paired.
    out = []
    for g in glyphs:
        if g.text == _ZERO_WIDTH_SPACE:
            continue
        n = len(g.text)
        for k, ch in enumerate(g.text):
            out.append(Glyph(ch, g.x + g.width * k / n, g.y, g.width / n, g.height))
    return out


_DIRECTIONS = ("up", "down", "left", "right")


def _neighbours(glyphs: list[Glyph], tol: float) -> list[dict[str, int | None]]:
    """For each glyph, the index of the nearest aligned glyph in each direction."""
    centers = [g.center for g in glyphs]
    result = []
    for i, (cx, cy) in enumerate(centers):
        best: dict[str, tuple[float, int] | None] = dict.fromkeys(_DIRECTIONS)
        for j, (ox, oy) in enumerate(centers):
            if i == j:
                continue
            found = []
            if abs(ox - cx) <= tol:
                if oy < cy:
                    found.append(("up", cy - oy))
                elif oy > cy:
                    found.append(("down", oy - cy))
            if abs(oy - cy) <= tol:
                if ox < cx:
                    found.append(("left", cx - ox))
                elif ox > cx:
                    found.append(("right", ox - cx))
            for direction, dist in found:
                current = best[direction]
                # Strictly nearer wins, so ties keep the earliest glyph.
                if current is None or dist < current[0]:
                    best[direction] = (dist, j)
        result.append({d: (b[1] if b else None) for d, b in best.items()})
    return result


def _glyph_layouts_match(reference: list[Glyph], candidate: list[Glyph], tol: float) -> bool:
    """Whether each reference glyph maps to a distinct candidate glyph, neighbours agreeing.

    Depth-first search over assignments in reference order (iterative, so long
    equations cannot exhaust the recursion limit).
    """
    options = [[j for j, c in enumerate(candidate) if c.text == r.text] for r in reference]
    if any(not o for o in options):
        return False
    ref_nb = _neighbours(reference, tol)
    cand_nb = _neighbours(candidate, tol)
    n = len(reference)
    assigned: dict[int, int] = {}
    used = [False] * len(candidate)
    next_option = [0] * n

    def consistent(i: int, j: int) -> bool:
        for direction in _DIRECTIONS:
            r_nb = ref_nb[i][direction]
            if r_nb is None:
                continue
            c_nb = cand_nb[j][direction]
            if c_nb is None:
                return False
            if r_nb in assigned:
                if assigned[r_nb] != c_nb:
                    return False
            elif candidate[c_nb].text != reference[r_nb].text:
                return False
        return True

    i = 0
    while 0 <= i < n:
        if i in assigned:  # returning here after a dead end further on: undo
            used[assigned.pop(i)] = False
        placed = False
        while next_option[i] < len(options[i]):
            j = options[i][next_option[i]]
            next_option[i] += 1
            if used[j]:
                continue
            assigned[i] = j
            used[j] = True
            if consistent(i, j):
                placed = True
                break
            used[j] = False
            del assigned[i]
        if placed:
            i += 1
            if i < n:
                next_option[i] = 0
        else:
            next_option[i] = 0
            i -= 1
    return i == n


def equations_equivalent(
    reference: RenderedEquation, candidate: RenderedEquation, tol: float = ALIGN_TOLERANCE_PX
) -> bool:
    """Whether ``candidate`` renders what ``reference`` renders (see module doc)."""
    if mathml_core(reference.mathml) in mathml_core(candidate.mathml):
        return True
    return _glyph_layouts_match(
        _split_glyphs(reference.glyphs), _split_glyphs(candidate.glyphs), tol
    )


# --- KaTeX in headless Chromium ---------------------------------------------


def find_katex_assets(katex_dir: Path | None = None) -> Path | None:
    """A folder holding ``katex.min.js`` and ``katex.min.css``, or ``None``.

    Looked for in ``katex_dir``, then ``$OCRCLI_KATEX_DIR``, then the copy the
    ``olmocr`` package ships (found without importing it).
    """
    candidates: list[Path] = []
    if katex_dir is not None:
        candidates.append(Path(katex_dir))
    if os.environ.get("OCRCLI_KATEX_DIR"):
        candidates.append(Path(os.environ["OCRCLI_KATEX_DIR"]))
    spec = importlib.util.find_spec("olmocr")
    if spec is not None and spec.submodule_search_locations:
        candidates.extend(Path(p) / "bench" / "katex" for p in spec.submodule_search_locations)
    for folder in candidates:
        if (folder / "katex.min.js").is_file() and (folder / "katex.min.css").is_file():
            return folder
    return None


# The page centres the equation in the viewport like the official renderer's,
# so that sub-pixel box positions (and hence alignment within tolerance) agree.
_PAGE = f"""<!DOCTYPE html>
<html><head><style>
body {{ margin: 0; height: 100vh; display: flex; align-items: center;
        justify-content: center; background: white; color: black; }}
#eq {{ padding: 0; font-size: {FONT_SIZE_PX}px; }}
</style></head><body><div id="eq"></div></body></html>"""

# Renders one equation and returns the error, or the leaf spans and MathML.
_RENDER_JS = """(latex) => {
  const box = document.getElementById("eq");
  box.textContent = "";
  try {
    katex.render(latex, box, {displayMode: true, throwOnError: true});
  } catch (e) {
    return {error: String(e && e.message ? e.message : e)};
  }
  const glyphs = [];
  for (const span of box.querySelectorAll("span")) {
    if (span.children.length === 0 && /\\S/.test(span.textContent)) {
      const r = span.getBoundingClientRect();
      glyphs.push([span.textContent.trim(), r.x, r.y, r.width, r.height]);
    }
  }
  const math = box.querySelector(".katex-mathml math");
  return {glyphs: glyphs, mathml: math ? math.outerHTML : ""};
}"""


class KatexRenderer:
    """KaTeX in one headless Chromium page; use as a context manager or call ``close``.

    Renders are memoised per instance, since a bench renders the same reference
    equation once per candidate output.
    """

    def __init__(self, katex_dir: Path | None = None) -> None:
        assets = find_katex_assets(katex_dir)
        if assets is None:
            raise RendererUnavailable(
                "KaTeX assets not found (set OCRCLI_KATEX_DIR to a folder with "
                "katex.min.js and katex.min.css, or install olmocr)"
            )
        try:
            from playwright.sync_api import sync_playwright
        except ImportError as exc:
            raise RendererUnavailable("playwright is not installed") from exc
        self._cache: dict[str, RenderedEquation | None] = {}
        self._playwright: Any = sync_playwright().start()
        try:
            self._browser = self._playwright.chromium.launch()
            self._page = self._browser.new_page(viewport=_VIEWPORT)
            self._page.set_content(_PAGE)
            self._page.add_style_tag(path=str(assets / "katex.min.css"))
            self._page.add_script_tag(path=str(assets / "katex.min.js"))
            if not self._page.evaluate("typeof katex !== 'undefined'"):
                raise RendererUnavailable(f"katex.min.js in {assets} did not load")
        except Exception as exc:
            self._playwright.stop()
            if isinstance(exc, RendererUnavailable):
                raise
            raise RendererUnavailable(f"headless Chromium could not start: {exc}") from exc

    def render(self, latex: str) -> RenderedEquation | None:
        if latex not in self._cache:
            result = self._page.evaluate(_RENDER_JS, latex)
            if "error" in result:
                self._cache[latex] = None
            else:
                glyphs = tuple(Glyph(t, x, y, w, h) for t, x, y, w, h in result["glyphs"])
                self._cache[latex] = RenderedEquation(result["mathml"], glyphs)
        return self._cache[latex]

    def close(self) -> None:
        try:
            self._browser.close()
        finally:
            self._playwright.stop()

    def __enter__(self) -> KatexRenderer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
