"""Start-up cost of `ocrcli`, against the cost of importing torch.

Three commands, each run as its own process, interleaved over N repeats (after one discarded
warm-up of each), wall-clock medians reported:

  (a) python -c "import torch"            the floor any torch-based converter pays
  (b) ocrcli --help                       the command line alone
  (c) ocrcli convert blank64.png -o OUT --quiet
                                          a blank white 64x64 PNG, end to end (model load,
                                          one page decoded, outputs written), each repeat
                                          into a fresh output folder so nothing is resumed

Prints the medians, the ratio (c)/(a) and (b) in seconds; `--json` prints one JSON object.

    python scripts/bench_startup.py [--repeats 5] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def blank_png(path: Path, size: int = 64) -> None:
    """A white `size`x`size` 8-bit RGB PNG, written with zlib alone."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(
            ">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    rows = b"".join(b"\x00" + b"\xff" * (3 * size) for _ in range(size))
    path.write_bytes(b"\x89PNG\r\n\x1a\n"
                     + chunk(b"IHDR", struct.pack(">IIBBBBB", size, size, 8, 2, 0, 0, 0))
                     + chunk(b"IDAT", zlib.compress(rows, 9)) + chunk(b"IEND", b""))


def ocrcli_command() -> list[str]:
    """The installed `ocrcli` script next to this Python, else `python -m ocrcli.cli`."""
    script = Path(sys.executable).parent / "ocrcli"
    if script.exists():
        return [str(script)]
    found = shutil.which("ocrcli")
    return [found] if found else [sys.executable, "-m", "ocrcli.cli"]


def timed(argv: list[str]) -> float:
    start = time.perf_counter()
    proc = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=ROOT)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {proc.returncode}:\n"
                         f"{proc.stderr.decode(errors='replace')[-2000:]}")
    return elapsed


def commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                             capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True, check=True).stdout.strip()
        return out + ("+uncommitted changes" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def hardware() -> dict:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpu": cpu, "machine": platform.machine(), "cpu_count": os.cpu_count(),
            "os": platform.platform(), "python": platform.python_version()}


def run(repeats: int) -> dict:
    ocrcli = ocrcli_command()
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as tmp:
        png = Path(tmp) / "blank64.png"
        blank_png(png)
        counter = iter(range(10**9))
        commands = {
            "import_torch": lambda: [sys.executable, "-c", "import torch"],
            "help": lambda: [*ocrcli, "--help"],
            "convert_blank64": lambda: [*ocrcli, "convert", str(png), "-o",
                                        str(Path(tmp) / f"out{next(counter)}"), "--quiet"],
        }
        for make in commands.values():  # one discarded warm-up of each
            timed(make())
        times: dict[str, list[float]] = {name: [] for name in commands}
        for _ in range(repeats):
            for name, make in commands.items():
                times[name].append(timed(make()))
    med = {name: statistics.median(ts) for name, ts in times.items()}
    return {
        "commands": {"import_torch": f'{sys.executable} -c "import torch"',
                     "help": f"{' '.join(ocrcli)} --help",
                     "convert_blank64": f"{' '.join(ocrcli)} convert blank64.png -o OUT --quiet"},
        "commit": commit(), "hardware": hardware(), "repeats": repeats,
        "seconds": {name: [round(t, 4) for t in ts] for name, ts in times.items()},
        "median_s": {name: round(t, 4) for name, t in med.items()},
        "ratio_convert_over_import_torch": round(med["convert_blank64"] / med["import_torch"], 3),
        "help_s": round(med["help"], 4),
    }


def print_report(r: dict) -> None:
    hw = r["hardware"]
    print(f"bench_startup: commit {r['commit']}; {hw['cpu']} ({hw['machine']}, "
          f"{hw['cpu_count']} CPUs), {hw['os']}, Python {hw['python']}")
    print(f"medians of {r['repeats']} interleaved repeats (after one discarded warm-up each):")
    labels = {"import_torch": "(a)", "help": "(b)", "convert_blank64": "(c)"}
    for name, label in labels.items():
        runs = " ".join(f"{t:.3f}" for t in r["seconds"][name])
        print(f"  {label} {r['median_s'][name]:7.3f} s  {r['commands'][name]}\n"
              f"              runs: {runs}")
    print(f"  (c)/(a) = {r['ratio_convert_over_import_torch']:.2f}x   (b) = {r['help_s']:.3f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5, help="Interleaved repeats (default 5).")
    parser.add_argument("--json", action="store_true", help="Print one JSON object.")
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    result = run(args.repeats)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print_report(result)


if __name__ == "__main__":
    main()
