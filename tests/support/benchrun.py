"""A bench script of bench/ run as a user runs it, for the tests that smoke-test a bench."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.support.proc import REPO, captured


def run_bench(script: str, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """``python bench/<script> ARGS`` from the repository (``script`` may name a folder of
    bench/, ``device/x.py``), with this interpreter and the package on the path."""
    path = os.pathsep.join([str(REPO / "agent"), str(REPO), os.environ.get("PYTHONPATH", "")])
    env = dict(os.environ, PYTHONPATH=path)
    return captured([sys.executable, str(REPO / "bench" / script), *args], timeout=timeout,
                    env=env, cwd=REPO)  # fmt: skip
