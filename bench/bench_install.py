"""The agent's Python footprint as installed: size, start-up import time, RSS.

    python3 bench/bench_install.py --spec before=/path/to/old/tree --spec after=. \\
        --spec after-kubernetes='.[kubernetes]' --json out/install.json

For each ``LABEL=SPEC``: a fresh venv, ``pip install SPEC`` (not editable, as
the image installs it), then

- installed size: every file the install added to the venv (the empty venv's
  own pip is subtracted), and the largest distributions;
- import time: wall time of ``from inferwatch.cli import build_parser;
  build_parser()`` (what ``inferwatch run`` does before it starts), median
  of 7 fresh interpreters;
- RSS: ``inferwatch run --gpu-backend none`` on a loopback port, read 3 s
  after /healthz answers (no GPU here: NVML is not loaded in either case).

Asserts nothing; prints a table and writes JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import psutil

IMPORT = (
    "import time; t = time.perf_counter(); from inferwatch.cli import build_parser; "
    "build_parser(); print(time.perf_counter() - t)"
)


def _size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())


def _site(venv: Path) -> Path:
    return next((venv / "lib").glob("python3*/site-packages"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def measure(label: str, spec: str, work: Path) -> dict[str, Any]:
    venv = work / label
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = venv / "bin" / "python"
    empty = _size(venv)
    subprocess.run([str(py), "-m", "pip", "install", "-q", spec], check=True)
    site = _site(venv)
    dists = {}
    for d in site.iterdir():
        if d.is_dir() and not d.name.endswith((".dist-info", "__pycache__")):
            dists[d.name] = _size(d)
    times = []
    for _ in range(7):
        out = subprocess.run([str(py), "-c", IMPORT], check=True, capture_output=True, text=True)
        times.append(float(out.stdout.strip()))
    port = _free_port()
    proc = subprocess.Popen(
        [
            str(venv / "bin" / "inferwatch"),
            "run",
            "--gpu-backend",
            "none",
            "--listen",
            f"127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        time.sleep(3)
        rss = psutil.Process(proc.pid).memory_info().rss
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    return {
        "label": label,
        "spec": spec,
        "installed_bytes": _size(venv) - empty,
        "largest": sorted(dists.items(), key=lambda kv: -kv[1])[:8],
        "import_seconds_median": statistics.median(times),
        "import_seconds_all": times,
        "rss_bytes": rss,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--spec", action="append", required=True, metavar="LABEL=SPEC")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory(prefix="iw-install-") as tmp:
        for item in args.spec:
            label, _, spec = item.partition("=")
            results.append(measure(label, os.path.expanduser(spec), Path(tmp)))
    print(f"{'install':<24} {'size MB':>8} {'import ms':>10} {'RSS MB':>8}")
    for r in results:
        print(
            f"{r['label']:<24} {r['installed_bytes'] / 1e6:>8.1f} "
            f"{r['import_seconds_median'] * 1e3:>10.0f} {r['rss_bytes'] / 1e6:>8.1f}"
        )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
