"""Rendered pages -> `PageRecord`s through one model and engine: what a worker runs.

`convert` does this inline, streaming pages from its renderer into the engine. A worker of an
external engine gets its pages in batches instead, so here a batch is turned into requests by
the model's adapter, in page order, decoded in one continuous batch, and assembled into the
same records `convert` writes (same fields, same statuses, same failure reasons).
The page steps themselves (`PageAssembly`, `failed_record`) are `ocrcli/pages.py`, shared with
`convert`.
"""

from __future__ import annotations

from ocrcli.convert import ConvertSettings, loaded_fingerprint, make_engine, max_new_tokens
from ocrcli.engine.scheduler import list_source
from ocrcli.errors import one_line
from ocrcli.models.base import DecodeRequest, LoadedModel
from ocrcli.output import PageRecord
from ocrcli.pages import PageAssembly, failed_record
from ocrcli.render import PageImage


class PageDecoder:
    """Owns one loaded model and its engine; decodes batches of rendered pages."""

    def __init__(self, loaded: LoadedModel, settings: ConvertSettings):
        self.loaded = loaded
        self.max_new = max_new_tokens(settings, loaded.model.spec.default_max_new_tokens)
        self.fingerprint = loaded_fingerprint(loaded, settings, self.max_new)
        self.engine = make_engine(loaded, settings, self.max_new)

    def decode(self, images: list[PageImage]) -> list[PageRecord]:
        """One record per image, in order. A page that fails never stops the others."""
        loaded, fp = self.loaded, self.fingerprint
        records: list[PageRecord | None] = [None] * len(images)
        decoding: dict[int, PageAssembly] = {}
        queue: list[DecodeRequest] = []
        for i, image in enumerate(images):
            if image.error:
                status = "timeout" if image.timed_out else "failed"
                records[i] = failed_record(image, status, image.error, loaded.model_id, fp)
                continue
            try:
                requests = loaded.adapter.page_requests(image.image, self.max_new)
            except Exception as exc:  # a page the model cannot read must not stop the batch
                records[i] = failed_record(image, "failed", one_line(f"cannot prepare page: {exc}"),
                                           loaded.model_id, fp)
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
            page.add(j, loaded.tokenizer.decode(result.tokens) if result.tokens else "",
                     result.status, result.stats, result.error)
            if page.finished:
                records[i] = decoding.pop(i).record(loaded, fp)
        assert not decoding, "the engine ended before every request did"
        return records  # type: ignore[return-value]  # every slot is filled above
