"""Rendered pages -> `PageRecord`s through one model and engine: what a worker runs.

`convert` does this inline, streaming pages from its renderer into the engine. A worker of an
external engine gets its pages in batches instead, so here a batch is turned into requests by
the model's adapter, in page order, decoded in one continuous batch, and assembled into the
same records `convert` writes (same fields, same statuses, same failure reasons).
The page steps themselves (`start_page`, `PageAssembly`) are `ocrcli/pages.py`, shared with
`convert`.
"""

from __future__ import annotations

from ocrcli.engine.scheduler import list_source
from ocrcli.fingerprint import loaded_fingerprint
from ocrcli.model_setup import make_engine, max_new_tokens
from ocrcli.models.base import DecodeRequest, LoadedModel
from ocrcli.output import PageRecord
from ocrcli.pages import PageAssembly, start_page
from ocrcli.render import PageImage
from ocrcli.settings import ConvertSettings


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
        for i, image in enumerate(images):
            page = start_page(image, i, loaded, self.max_new, fp)
            if isinstance(page, PageRecord):
                records[i] = page
            else:
                decoding[i] = page
        requests = [r for page in decoding.values() for r in page.requests]
        while requests:  # then the rereads of unsure regions, until there are none
            rereads: list[DecodeRequest] = []
            for result in self.engine.run(list_source(requests)):
                i, j = result.key
                page = decoding[i]
                rereads += page.add(j, loaded.tokenizer.decode(result.tokens) if result.tokens
                                    else "", result.status, result.stats, result.error)
                if page.finished:
                    records[i] = decoding.pop(i).record(loaded, fp)
            requests = rereads
        assert not decoding, "the engine ended before every request did"
        return records  # type: ignore[return-value]  # every slot is filled above
