"""Ray Data: `convert`'s render, decode and write steps as dataset stages.

    documents still to do (driver)
      -> flat_map(render_document)        CPU tasks: one document -> its page images
      -> map_batches(PageOcrWorker)       actors, one model each; num_gpus=1 on GPU, 0 on CPU
      -> map_batches(write_pages)         CPU tasks: atomic page files, as `convert` writes them
      -> the driver (RunLedger)           manifests, combined Markdown, summary.json

The page files are the same bytes `convert` writes (timings aside), so the two mix freely in
one OUT and `--resume` works across them. Workers read the inputs and write OUT themselves: on
a cluster both must be paths that every node mounts, and every node needs ocrcli installed.

Ray is an optional extra (`pip install ocrcli[ray]`); only this module imports it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import orjson
import ray
import ray.data
from PIL import Image

from ocrcli.distributed.page_decoder import PageDecoder
from ocrcli.errors import ExitCode, OcrCliError
from ocrcli.inputs import PageRef
from ocrcli.ledger import DocumentWork, PageOutcome, RunLedger
from ocrcli.model_setup import load_for_run
from ocrcli.output import OutputTree, PageRecord
from ocrcli.pages import write_record
from ocrcli.plan import plan_run
from ocrcli.progress import Reporter
from ocrcli.render import PageImage, RenderSettings, render_page
from ocrcli.settings import ConvertSettings
from ocrcli.summary import summary_name
from ocrcli.text_layer import DPI_KEY, TextLayer, attach, rendered_dpi, text_layer_of

# Columns hold no None: Ray Data turns an all-null column into floats (NaN), so a page without
# an error has "" and a page without pixels has an empty image.
NO_IMAGE = np.zeros((0, 0, 3), dtype=np.uint8)
NO_BOXES = np.zeros((0, 4), dtype=np.float32)  # a page without a text layer


@dataclass(frozen=True)
class RayOptions:
    address: str | None = None  # None: $RAY_ADDRESS, else a local Ray started for this run
    actors: int | None = None  # model replicas; None: one per cluster GPU, or 1 without GPUs
    gpus_per_actor: float | None = None  # None: 1 when the cluster has GPUs, else 0
    pages_per_batch: int = 32  # pages an actor decodes together (their requests share the engine)


def document_rows(work: list[DocumentWork]) -> list[dict]:
    """The dataset's input: one row per document, with the pages still to convert.

    `path` is absolute because workers may start in another folder; `source` is the path as the
    user gave it, which the records keep (as `convert`'s do).
    """
    return [{"doc_index": w.index, "path": str(w.document.path.absolute()),
             "source": str(w.document.path), "kind": w.document.kind, "rel": w.document.rel,
             "pages": w.pages} for w in work]


def render_document(row: dict, settings: RenderSettings) -> Iterator[dict]:
    """CPU `flat_map`: a document row -> one row per page with its RGB pixels (or its error).

    Pages come one at a time, so a long PDF streams instead of filling a worker's memory.
    """
    for page in row["pages"]:
        ref = PageRef(int(row["doc_index"]), Path(row["path"]), row["kind"], int(page))
        image = render_page(ref, settings)
        layer = text_layer_of(image.image)  # the text layer travels as two columns
        # ...and the dpi the page was rendered at, which the built-in model's layout reads
        render_dpi = rendered_dpi(image.image) if image.image is not None else None
        yield {"text_chars": layer.chars if layer else "",
               "text_boxes": layer.boxes if layer else NO_BOXES,
               "doc_index": ref.doc_index, "source": row["source"], "kind": ref.kind, "rel": row["rel"],
               "page": ref.page, "dpi": float(image.dpi), "render_dpi": render_dpi or 0.0,
               "error": image.error or "",
               "image": NO_IMAGE if image.image is None else np.asarray(image.image)}


def _page_image(batch: dict, i: int) -> PageImage:
    ref = PageRef(int(batch["doc_index"][i]), Path(batch["source"][i]), str(batch["kind"][i]),
                  int(batch["page"][i]))
    error = batch["error"][i]
    if error:
        return PageImage(ref, None, float(batch["dpi"][i]), str(error))
    image = Image.fromarray(np.asarray(batch["image"][i]), "RGB")
    if batch["render_dpi"][i]:
        image.info[DPI_KEY] = float(batch["render_dpi"][i])
    if batch["text_chars"][i]:
        attach(image, TextLayer(str(batch["text_chars"][i]), np.asarray(batch["text_boxes"][i])))
    return PageImage(ref, image, float(batch["dpi"][i]))


def worker_device(device: str, gpus_per_actor: float) -> str:
    """An actor uses a GPU only when Ray gave it one, whatever else the node has."""
    if device != "auto":
        return device
    return "cuda" if gpus_per_actor > 0 else "cpu"


class PageOcrWorker:
    """`map_batches` actor: loads the model once, then decodes batches of page rows."""

    def __init__(self, settings: ConvertSettings, device: str, expected_fingerprint: str):
        self.decoder = PageDecoder(load_for_run(settings, device), settings)
        if self.decoder.fingerprint != expected_fingerprint:  # e.g. other weights on this node
            raise RuntimeError(f"this worker's model fingerprint {self.decoder.fingerprint} differs "
                               f"from the run's {expected_fingerprint}: is every node's model the same?")

    def __call__(self, batch: dict) -> dict:
        images = [_page_image(batch, i) for i in range(len(batch["page"]))]
        records = self.decoder.decode(images)
        return {"doc_index": np.asarray(batch["doc_index"]), "rel": np.asarray(batch["rel"]),
                "record": [orjson.dumps(asdict(r)) for r in records]}


def write_pages(batch: dict, out: str, formats: frozenset[str]) -> dict:
    """CPU `map_batches`: write each page record (atomically); return what the driver counts."""
    tree = OutputTree(Path(out))
    outcomes: dict[str, list] = {k: [] for k in ("doc_index", "page", "status", "error", "tokens",
                                                 "verify_steps")}
    for doc_index, rel, raw in zip(batch["doc_index"], batch["rel"], batch["record"]):
        record = PageRecord(**orjson.loads(raw))
        write_record(tree, str(rel), record, formats)
        for key, value in (("doc_index", int(doc_index)), ("page", record.page),
                           ("status", record.status), ("error", record.error or ""),
                           ("tokens", record.tokens), ("verify_steps", record.verify_steps)):
            outcomes[key].append(value)
    return outcomes


@ray.remote
def model_fingerprint(settings: ConvertSettings, device: str) -> tuple[str, str]:
    """Where the workers will run: the run's fingerprint and model id (one model load)."""
    decoder = PageDecoder(load_for_run(settings, device), settings)
    return decoder.fingerprint, decoder.loaded.model_id


def build_pipeline(work: list[DocumentWork], settings: ConvertSettings, options: RayOptions,
                   gpus_per_actor: float, actors: int, fingerprint: str) -> ray.data.Dataset:
    """The lazy dataset of page outcomes; iterating it runs the conversion."""
    device = worker_device(settings.device, gpus_per_actor)
    render = RenderSettings(settings.dpi, settings.max_pixels, settings.password)
    return (ray.data.from_items(document_rows(work))
            .flat_map(render_document, fn_kwargs={"settings": render})
            .map_batches(PageOcrWorker, batch_size=options.pages_per_batch, batch_format="numpy",
                         fn_constructor_kwargs={"settings": settings, "device": device,
                                                "expected_fingerprint": fingerprint},
                         num_gpus=gpus_per_actor, compute=ray.data.ActorPoolStrategy(size=actors))
            .map_batches(write_pages, batch_format="numpy",
                         fn_kwargs={"out": str(settings.out), "formats": settings.formats}))


def _cluster_plan(options: RayOptions) -> tuple[float, int]:
    """GPUs per actor and the number of actors, from the options or the cluster's resources."""
    cluster_gpus = ray.cluster_resources().get("GPU", 0)
    gpus = options.gpus_per_actor if options.gpus_per_actor is not None else (1 if cluster_gpus else 0)
    if options.actors is not None:
        return gpus, options.actors
    return gpus, max(1, int(cluster_gpus // gpus)) if gpus else 1


def run_ray_convert(settings: ConvertSettings, options: RayOptions,
                    reporter: Reporter) -> tuple[ExitCode, dict]:
    """`convert` on Ray: same inputs, outputs, resume, summary and exit codes."""
    s = replace(settings, out=settings.out.absolute())  # workers may start in other folders
    plan = plan_run(s, reporter)
    if plan.empty_shard:  # no model is loaded for no pages
        return _finish(s, RunLedger(OutputTree(s.out), [], None, s.model, reporter, s.accept),
                       0.0, False)
    started_ray = not ray.is_initialized()
    if started_ray:
        ray.init(address=options.address, include_dashboard=False,
                 log_to_driver=not reporter.quiet)
    try:
        ray.data.DataContext.get_current().enable_progress_bars = False  # ocrcli reports progress
        gpus, actors = _cluster_plan(options)
        device = worker_device(s.device, gpus)
        try:
            fp, model_id = ray.get(model_fingerprint.options(num_gpus=gpus).remote(s, device))
        except ray.exceptions.RayTaskError as exc:  # a model that cannot load: convert's message
            if isinstance(exc.cause, OcrCliError):
                raise exc.cause from None
            raise
        ledger = RunLedger(OutputTree(s.out), plan.documents, fp, model_id, reporter, s.accept)
        work = ledger.plan(s.resume, s.formats, s.retry)
        t0 = time.perf_counter()
        interrupted = False
        try:
            if work:
                for batch in build_pipeline(work, s, options, gpus, actors, fp).iter_batches(
                        batch_format="numpy"):
                    for i in range(len(batch["page"])):
                        ledger.page_written(PageOutcome(
                            int(batch["doc_index"][i]), int(batch["page"][i]), str(batch["status"][i]),
                            str(batch["error"][i]) or None, int(batch["tokens"][i]),
                            int(batch["verify_steps"][i])))
        except KeyboardInterrupt:  # finished pages are on disk; a rerun resumes after them
            interrupted = True
        ledger.finish_remaining()
        return _finish(s, ledger, time.perf_counter() - t0, interrupted)
    finally:
        if started_ray:
            ray.shutdown()


def _finish(s: ConvertSettings, ledger: RunLedger, elapsed: float,
            interrupted: bool) -> tuple[ExitCode, dict]:
    summary = ledger.summary(elapsed, interrupted)
    if (closing := ledger.closing_problem(interrupted)) is not None:
        ledger.report.problem(closing)
    ledger.tree.write_json(s.out / summary_name(s.shard), summary)
    ledger.report.finish(summary)
    return ledger.exit_code(interrupted), summary
