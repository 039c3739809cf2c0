"""Rendered pages -> `PageRecord`s through one model and engine: what a worker runs.

`convert` does this inline, streaming pages from its renderer into the engine. A worker of an
external engine gets its pages in batches instead, so here a batch is turned into requests by
the model's adapter, in page order, decoded in one continuous batch, and assembled into the
same records `convert` writes (same fields, same statuses, same failure reasons).

TODO(lead): `Converter._PageState/_record/_write_page` hold the same steps; the plan is that
`convert` builds its records with `PageAssembly` and the policy helpers below, so the two
paths cannot drift apart (see the report for issue 9).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from ocrcli.convert import CONVERTED, STATUS_RANK, ConvertSettings, loaded_fingerprint
from ocrcli.engine.policy import DraftPolicy, default_policy
from ocrcli.engine.scheduler import DecodeResult, Engine, list_source
from ocrcli.errors import one_line
from ocrcli.evaluation.checks import quality_flags
from ocrcli.inputs import path_text
from ocrcli.models.base import DecodeRequest, LoadedModel
from ocrcli.output import PageRecord
from ocrcli.render import PageImage


def max_new_tokens(settings: ConvertSettings) -> int:
    """The token cap per request: the option, else the model's default (as `convert` uses)."""
    return settings.max_new_tokens or (160 if settings.model == "builtin" else 8192)


def draft_policy(loaded: LoadedModel, settings: ConvertSettings) -> DraftPolicy:
    """Gated drafting up to the head's depth by default; a fixed depth when one is given."""
    if settings.draft_depth is None:
        return default_policy(loaded.model.max_draft_depth, settings.batch_size, settings.min_prob,
                              settings.min_path_prob)
    return DraftPolicy(settings.draft_depth)


@dataclass
class PageAssembly:
    """One page's requests while they decode; a record once every request has ended."""

    image: PageImage
    requests: list[DecodeRequest]
    texts: list[str | None]
    statuses: list[str]
    errors: list[str] = field(default_factory=list)  # why requests failed (out of memory)
    tokens: int = 0
    verify_steps: int = 0
    hist: Counter = field(default_factory=Counter)

    @classmethod
    def start(cls, image: PageImage, requests: list[DecodeRequest]) -> PageAssembly:
        return cls(image, requests, [None] * len(requests), ["ok"] * len(requests))

    def add(self, index: int, text: str, result: DecodeResult) -> None:
        self.texts[index] = text
        self.statuses[index] = result.status
        if result.error:
            self.errors.append(result.error)
        st = result.stats
        self.tokens += st.tokens
        self.verify_steps += st.verify_steps
        self.hist.update(st.accepted_hist)

    @property
    def finished(self) -> bool:
        return all(t is not None for t in self.texts)

    def record(self, loaded: LoadedModel, fp: str) -> PageRecord:
        status = max(self.statuses, key=STATUS_RANK.__getitem__) if self.statuses else "ok"
        if status not in CONVERTED:  # the worst request decides: one failed request fails the page
            return failed_record(self.image, status, self.errors[0] if self.errors else
                                 "decoding failed", loaded, fp)
        text = loaded.adapter.assemble(self.requests, [t or "" for t in self.texts])
        w, h = self.image.image.size
        return PageRecord(
            source=path_text(self.image.ref.path), page=self.image.ref.page, status=status, text=text,
            width=w, height=h, dpi=round(self.image.dpi, 2), model=loaded.model_id,
            fingerprint=fp, tokens=self.tokens, requests=len(self.requests),
            verify_steps=self.verify_steps,
            mean_accepted=round(self.tokens / self.verify_steps, 3) if self.verify_steps else 0.0,
            accepted_histogram={str(k): v for k, v in sorted(self.hist.items())},
            quality=quality_flags(text))


def failed_record(image: PageImage, status: str, error: str, loaded: LoadedModel, fp: str) -> PageRecord:
    """A page that could not be rendered, read or decoded: its status and reason, no text."""
    w, h = image.image.size if image.image is not None else (0, 0)
    return PageRecord(source=path_text(image.ref.path), page=image.ref.page, status=status,
                      error=error, width=w, height=h, model=loaded.model_id, fingerprint=fp)


class PageDecoder:
    """Owns one loaded model and its engine; decodes batches of rendered pages."""

    def __init__(self, loaded: LoadedModel, settings: ConvertSettings):
        self.loaded = loaded
        self.max_new = max_new_tokens(settings)
        self.fingerprint = loaded_fingerprint(loaded, settings, self.max_new)
        self.engine = Engine(loaded.model, settings.batch_size, self.max_new,
                             draft_policy(loaded, settings), loaded.guard)

    def decode(self, images: list[PageImage]) -> list[PageRecord]:
        """One record per image, in order. A page that fails never stops the others."""
        loaded, fp = self.loaded, self.fingerprint
        records: list[PageRecord | None] = [None] * len(images)
        decoding: dict[int, PageAssembly] = {}
        queue: list[DecodeRequest] = []
        for i, image in enumerate(images):
            if image.error:
                status = "timeout" if image.timed_out else "failed"
                records[i] = failed_record(image, status, image.error, loaded, fp)
                continue
            try:
                requests = loaded.adapter.page_requests(image.image, self.max_new)
            except Exception as exc:  # a page the model cannot read must not stop the batch
                records[i] = failed_record(image, "failed", one_line(f"cannot prepare page: {exc}"),
                                           loaded, fp)
                continue
            for j, r in enumerate(requests):
                r.key = (i, j)
            page = PageAssembly.start(image, requests)
            if requests:
                decoding[i] = page
                queue.extend(requests)
            else:  # a blank page
                records[i] = page.record(loaded, fp)
        for result in self.engine.run(list_source(queue)):
            i, j = result.key
            page = decoding[i]
            page.add(j, loaded.tokenizer.decode(result.tokens) if result.tokens else "", result)
            if page.finished:
                records[i] = decoding.pop(i).record(loaded, fp)
        assert not decoding, "the engine ended before every request did"
        return records  # type: ignore[return-value]  # every slot is filled above
