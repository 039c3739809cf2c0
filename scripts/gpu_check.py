"""The GPU path end to end, in one command that prints one JSON object.

    python scripts/gpu_check.py                      # on a CUDA device (sized for 8 minutes on one H200)
    python scripts/gpu_check.py --device cpu --tiny  # the same code paths at tiny sizes (CI)

(a) `tiny`: tiny DeepSeek-OCR and Jina-OCR-v1 checkpoints (scripts/make_tiny_checkpoint.py)
    converted from samples/ by the CLI with --draft-depth 0 and with default drafting (same
    Markdown?), the share of requests and tokens where speculative output equals greedy on the
    device, and the top-1 agreement of the device's dtype with float32 on the CPU.
(b) `decode`: DeepSeek-OCR and Jina-OCR-v1 at full size from random weights in bf16 (nothing
    to download; `--tiny`: tiny widths, full depth), decode tokens/s for greedy and
    oracle-acceptance drafting at K=1..3, at batches 1, 8 and 32, eager and captured, with the
    fraction of the memory-bandwidth roofline: bytes of weights and KV cache read per step,
    over the step time and the device's peak bandwidth (`--peak-gbs`).
(c) `convert`: `ocrcli convert samples` with a random checkpoint of (b)'s size written to
    disk: exit code and pages/s.

A section past `--budget-s` is skipped and says so; (b) stops in time to leave (c) its
`--convert-reserve-s`. With `--out FILE` the report is rewritten after every section and decode
row, so a run stopped early keeps what it measured; progress goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from make_tiny_checkpoint import build_tokenizer, randomize, write_tiny_checkpoint  # noqa: E402

from ocrcli.engine.capture import CaptureSettings  # noqa: E402
from ocrcli.engine.draft import OracleProposer  # noqa: E402
from ocrcli.engine.policy import DraftPolicy  # noqa: E402
from ocrcli.engine.scheduler import SPAN_BUCKET, Engine, list_source  # noqa: E402
from ocrcli.models.base import DecodeRequest  # noqa: E402
from ocrcli.models.deepseek_ocr.config import (  # noqa: E402
    ARCHES,
    JINA_OCR_V1,
    config_to_hf,
    full_config,
    tiny_config,
)
from ocrcli.models.deepseek_ocr.model import DeepseekOcrForCausalLM  # noqa: E402
from ocrcli.models.deepseek_ocr.preprocess import MODES, placeholder_count, preprocess_page  # noqa: E402
from ocrcli.models.deepseek_ocr.runtime import DeepseekOcrDecoder  # noqa: E402
from ocrcli.models.registry import load_model  # noqa: E402

# Random and tiny checkpoints read noise, so their pages are flagged (exit 5): the check is the
# path, not the verdicts.
ACCEPT_FLAGGED = ("--accept", "truncated,degenerate")


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ocrcli.cli", *args], capture_output=True,
                          text=True, cwd=ROOT)


def markdown_of(out: Path) -> dict[str, str]:
    return {str(p.relative_to(out)): p.read_text() for p in sorted(out.rglob("*.md"))}


def tiny_section(device: str, work: Path) -> dict:
    """(a) the CLI on tiny checkpoints, greedy vs drafting, and dtype agreement."""
    result = {}
    for arch in ARCHES:
        folder = write_tiny_checkpoint(work / arch, arch, seed=1, draftable=True)
        runs = {}
        for name, extra in (("greedy", ["--draft-depth", "0"]), ("default", [])):
            out = work / f"{arch}-{name}"
            t0 = time.perf_counter()
            done = run_cli("convert", str(ROOT / "samples"), "-o", str(out), "--model", str(folder),
                           "--device", device, "--max-new-tokens", "64", *ACCEPT_FLAGGED, *extra)
            runs[name] = {"exit": done.returncode, "seconds": round(time.perf_counter() - t0, 1),
                          "traceback": "Traceback" in done.stderr, "markdown": markdown_of(out),
                          "stderr_tail": done.stderr[-300:]}
            progress(f"(a) {arch} {name}: exit {done.returncode} in {runs[name]['seconds']} s")
        same = runs["greedy"]["markdown"] == runs["default"]["markdown"]
        failed = {n: runs[n]["stderr_tail"] for n in runs if runs[n]["exit"]}
        result[arch] = {"exit_codes": [runs[n]["exit"] for n in runs],
                        "cli_seconds": [runs[n]["seconds"] for n in runs],
                        **({"stderr_tails": failed} if failed else {}),
                        "tracebacks": any(runs[n]["traceback"] for n in runs),
                        "markdown_files": len(runs["greedy"]["markdown"]), "markdown_identical": same,
                        **speculation_agreement(folder, device), **top1_agreement(folder, device)}
    return result


def synthetic_requests(cfg, n: int, max_new: int) -> list[DecodeRequest]:
    """Blank-page requests built as the adapter builds them (global view, no tiles)."""
    scale = cfg.image_size_scale
    from PIL import Image

    visual = preprocess_page(Image.new("RGB", (600, 600), "white"), MODES["gundam"], scale)
    prompt = [cfg.bos_id] + [cfg.image_token_id] * placeholder_count(visual, cfg.sam.patch_size)
    return [DecodeRequest(i, prompt + [100 + i, 10], visual, max_new) for i in range(n)]


def decode_all(model, requests, batch, policy, proposer=None, capture=None, engine=None):
    """Decode `requests` (on `engine` when given: a warm one keeps its compiled steps);
    returns outputs, seconds, decode steps and why capture was given up, if it was."""
    max_new = max(r.max_new_tokens for r in requests)
    engine = engine or Engine(model, batch, max_new, policy, proposer=proposer, exact=False,
                              capture=capture)
    steps = engine.steps
    if model.spec.device.type == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    results = list(engine.run(list_source(list(requests))))
    seconds = time.perf_counter() - t0
    return {r.key: r.tokens for r in results}, seconds, engine.steps - steps, engine.capture_error


def speculation_agreement(folder: Path, device: str) -> dict:
    """Share of requests and tokens where drafting (the head, else the oracle) gives greedy's
    output on the device: bitwise on the CPU, near-ties may flip with fast GPU kernels."""
    loaded = load_model(str(folder), device)
    cfg = loaded.model.net.config
    requests = synthetic_requests(cfg, 8, 48)
    greedy, *_ = decode_all(loaded.model, requests, 8, DraftPolicy(0))
    proposer = None
    if not loaded.model.spec.max_draft_depth:
        reference = {k: t + [loaded.model.spec.eos_id] for k, t in greedy.items()}
        proposer = OracleProposer(reference, 0.8, loaded.model.spec.vocab_size)
    drafted, *_ = decode_all(loaded.model, requests, 8, DraftPolicy(3), proposer)
    same_tokens = sum(_common_prefix(greedy[k], drafted[k]) for k in greedy)
    return {"spec_equals_greedy_requests": sum(greedy[k] == drafted[k] for k in greedy) / len(greedy),
            "spec_equals_greedy_tokens": same_tokens / max(1, sum(len(t) for t in greedy.values()))}


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def top1_agreement(folder: Path, device: str) -> dict:
    """Teacher-forced top-1 of the device model (bf16 on CUDA) against float32 on the CPU."""
    cpu, dev = load_model(str(folder), "cpu"), load_model(str(folder), device)
    cfg = cpu.model.net.config
    request = synthetic_requests(cfg, 1, 1)[0]
    gen = torch.Generator().manual_seed(0)
    text = torch.randint(3, 600, (1, 64), generator=gen)
    tops = []
    for loaded in (cpu, dev):
        model = loaded.model
        model.choose_kernels(model.spec.device.type == "cpu")
        model.setup_cache(1, len(request.prompt_ids) + 80)
        slots = torch.tensor([0], device=model.spec.device)
        _, _, lengths = model.prefill(slots, [request])
        positions = lengths[:, None] + torch.arange(64, device=model.spec.device)
        _, logits = model.forward(slice(0, 1), text.to(model.spec.device), positions)
        tops.append(logits.argmax(-1).cpu())
    return {"top1_agreement_vs_cpu_float32": float((tops[0] == tops[1]).float().mean())}


def random_decoder(arch: str, tiny: bool, device: str, dtype) -> DeepseekOcrDecoder:
    cfg = tiny_config(arch, full_structure=True) if tiny else full_config(arch)
    with torch.device(device):
        net = DeepseekOcrForCausalLM(cfg).to(dtype).eval()
    randomize(net, torch.Generator().manual_seed(0)) if tiny else _scale_random(net)
    prompt = len(synthetic_requests(cfg, 1, 1)[0].prompt_ids)
    return DeepseekOcrDecoder(net, prompt_bound=prompt)


@torch.no_grad()
def _scale_random(net) -> None:
    """Random weights on the device at O(1) activations (randomize() draws on the CPU: slow at 3B)."""
    for name, p in net.named_parameters():
        if p.dim() >= 2 and "embed" not in name:
            p.normal_(0, p.shape[-1] ** -0.5)
        elif p.dim() == 1 and name.endswith("weight"):
            p.fill_(1.0)


def step_bytes(model: DeepseekOcrDecoder, batch: int, t: int, span: int) -> float:
    """Least bytes one step must read: the decoder's weights (routed experts: those the
    batch's tokens reach, expected), the LM head, and each row's keys and values up to span."""
    cfg, net = model.config.decoder, model.net
    size = net.lm_head.weight.element_size()
    dense = sum(p.numel() for n, p in net.model.layers.named_parameters() if ".experts." not in n)
    expert = 3 * cfg.hidden_size * cfg.moe_intermediate_size
    moe_layers = cfg.layers - cfg.first_k_dense_replace
    e, k = cfg.n_routed_experts, cfg.experts_per_token
    reached = e * (1 - (1 - k / e) ** (batch * t))
    weights = (dense + moe_layers * reached * expert + net.lm_head.weight.numel()) * size
    kv = batch * cfg.layers * 2 * span * cfg.hidden_size * size
    return weights + kv


def progress(message: str) -> None:
    print(f"gpu_check: {message}", file=sys.stderr, flush=True)


def decode_section(args, deadline: float, rows: list[dict], save) -> list[dict]:
    """(b) decode tokens/s and roofline fraction, greedy and oracle K=1..3, eager/captured;
    Jina-OCR-v1 first (the captured rows are its), each row appended to `rows` and saved."""
    dtype = torch.float32 if args.device == "cpu" else torch.bfloat16
    batches = (1, 4) if args.tiny else (1, 8, 32)
    # On the CPU "captured" traces the same graphs without generating code: the path, not the speed.
    captured = CaptureSettings(mode=None, backend="eager") if args.device == "cpu" else CaptureSettings()
    captures = [None, captured]
    for arch in sorted(ARCHES, key=lambda a: a != JINA_OCR_V1):
        model = random_decoder(arch, args.tiny, args.device, dtype)
        for batch in batches:
            requests = synthetic_requests(model.config, batch, args.decode_tokens)
            short = [replace(r, max_new_tokens=1) for r in requests]
            greedy = None
            for capture in captures:
                if capture is not None and (arch != JINA_OCR_V1 or batch == batches[-1]):
                    continue  # capture compiles per shape: Jina at batches 1 and 8 fits the time
                for depth in (0, 1, 2, 3):
                    if time.perf_counter() > deadline:
                        rows.append({"arch": arch, "batch": batch, "skipped": "time budget"})
                        break
                    rows.append(_decode_row(model, requests, short, batch, depth, capture, greedy,
                                            args.peak_gbs))
                    greedy = greedy or rows[-1].pop("_outputs")
                    rows[-1].pop("_outputs", None)
                    progress(f"(b) {rows[-1]}")
                    save()
        del model
        if args.device.startswith("cuda"):
            torch.cuda.empty_cache()
    return rows


def _decode_row(model, requests, short, batch, depth, capture, greedy, peak_gbs) -> dict:
    proposer = None
    if depth:
        reference = {k: t + [model.spec.eos_id] for k, t in greedy.items()}
        proposer = OracleProposer(reference, 1.0, model.spec.vocab_size)
    policy = DraftPolicy(depth)
    max_new = requests[0].max_new_tokens
    engine = Engine(model, batch, max_new, policy, proposer=proposer, exact=False, capture=capture)
    decode_all(model, requests, batch, policy, engine=engine)  # warm: compile, allocator
    outputs, total, steps, error = decode_all(model, requests, batch, policy, engine=engine)
    prefill = decode_all(model, short, batch, policy, engine=engine)[1]
    seconds = max(total - prefill, 1e-9)  # decode alone: the same run's prefill taken out
    tokens = sum(len(t) for t in outputs.values()) - len(outputs)  # the first comes from prefill
    step_s = seconds / max(steps, 1)
    span = _mean_span(len(requests[0].prompt_ids) + max_new // 2 + depth + 1)
    bytes_per_step = step_bytes(model, batch, depth + 1, min(span, model.max_len))
    row = {"arch": model.config.arch, "batch": batch, "mode": f"oracle K={depth}" if depth else "greedy",
           "captured": capture is not None, "capture_error": error,
           "decode_tokens_per_s": round(tokens / seconds, 1), "step_ms": round(1000 * step_s, 3),
           "roofline_fraction": float(f"{bytes_per_step / step_s / (peak_gbs * 1e9):.3g}"),
           "_outputs": outputs}
    if greedy is not None:
        row["identical_to_greedy"] = outputs == greedy
    return row


def _mean_span(need: int, bucket: int = SPAN_BUCKET) -> int:
    """The fast engine's span (scheduler.Engine._span) at the run's mean length."""
    while bucket < need:
        bucket *= 2
    return bucket


def convert_section(args, work: Path) -> dict:
    """(c) a random checkpoint of the measured size on disk, converted end to end."""
    arch = JINA_OCR_V1
    folder = work / "random-checkpoint"
    if args.tiny:
        write_tiny_checkpoint(folder, arch, seed=2)
    else:
        _write_full_random(folder, arch)
    out = work / "convert"
    t0 = time.perf_counter()
    done = run_cli("convert", str(ROOT / "samples"), "-o", str(out), "--model", str(folder),
                   "--device", args.device, "--max-new-tokens", str(args.decode_tokens), *ACCEPT_FLAGGED)
    seconds = time.perf_counter() - t0
    summary = json.loads((out / "summary.json").read_text()) if (out / "summary.json").exists() else {}
    return {"exit": done.returncode, "traceback": "Traceback" in done.stderr,
            "pages": summary.get("pages"), "pages_per_s": summary.get("pages_per_s"),
            "seconds": round(seconds, 1), "stderr_tail": done.stderr[-300:]}


def _write_full_random(folder: Path, arch: str) -> None:
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    cfg = full_config(arch)
    model = random_decoder(arch, False, "cuda", torch.bfloat16)
    state = {k: v.detach().cpu().contiguous() for k, v in model.net.state_dict().items()}
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    (folder / "config.json").write_text(json.dumps(config_to_hf(cfg) | {"torch_dtype": "bfloat16"}))
    build_tokenizer(cfg.decoder.vocab_size).save(str(folder / "tokenizer.json"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--tiny", action="store_true", help="tiny widths (CPU / CI)")
    ap.add_argument("--decode-tokens", type=int, default=64, help="tokens per request in (b), (c)")
    ap.add_argument("--peak-gbs", type=float, default=4800.0, help="peak memory bandwidth, GB/s (H200)")
    ap.add_argument("--budget-s", type=float, default=420.0, help="skip what starts after this")
    ap.add_argument("--convert-reserve-s", type=float, default=None,
                    help="seconds (b) leaves for (c) (default: 100 at full size, 0 with --tiny)")
    ap.add_argument("--sections", default="abc", help="which of a, b, c to run")
    ap.add_argument("--out", type=Path, help="also write the report here, after every step")
    args = ap.parse_args()
    start = time.perf_counter()
    deadline = start + args.budget_s
    reserve = args.convert_reserve_s if args.convert_reserve_s is not None else (0 if args.tiny else 100)
    report = {"device": args.device, "tiny_sizes": args.tiny, "torch": torch.__version__}
    if args.device.startswith("cuda"):
        report["gpu"] = torch.cuda.get_device_name()

    def save() -> None:
        report["seconds"] = round(time.perf_counter() - start, 1)
        if args.out:
            args.out.write_text(json.dumps(report, indent=1))

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        rows: list[dict] = []
        sections = {"a": ("a_tiny_checkpoints", lambda: tiny_section(args.device, work)),
                    "b": ("b_decode", lambda: decode_section(args, deadline - reserve, rows, save)),
                    "c": ("c_convert", lambda: convert_section(args, work))}
        for key in args.sections:
            name, section = sections[key]
            if key == "b":
                report[name] = rows  # rows appear as they are measured
            if time.perf_counter() > deadline:
                report[name] = {"skipped": "time budget"}
                continue
            progress(f"{name} at {time.perf_counter() - start:.0f} s")
            try:
                report[name] = section()
            except Exception as exc:  # one section's failure is a result, not the end of the check
                report[name] = {"error": f"{type(exc).__name__}: {exc}"[:500],
                                **({"rows": rows} if key == "b" else {})}
            save()
    save()
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
