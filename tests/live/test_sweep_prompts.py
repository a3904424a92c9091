"""The GPU slot sweep's recorder, run off a GPU: each run sends prompts of its own.

``bench/device/llamacpp_trace.py sweep`` once drew every request's prompt from the same
random stream as its send times, with one seed for every load, so each load on a server
repeated the previous load's prompts in order and the real llama-server answered them
from its prompt cache (docs/advise.md, "The warmed sweep"). Here the recorder runs
against the real CPU llama-server (the tiny model, one slot, two short loads) and the
engine's own counters must show almost nothing taken from the cache in either load.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from tests.support.llamaserver import MODEL, SERVER, require_server, trace_prompt_tokens
from tests.support.proc import REPO

pytestmark = [pytest.mark.timeout(300)]

RATES = (2, 3)


def test_each_load_on_a_server_sends_prompts_of_its_own(tmp_path: Path) -> None:
    require_server()
    out = tmp_path / "sweep"
    argv = [
        sys.executable, str(REPO / "bench" / "device" / "llamacpp_trace.py"), "sweep",
        "--server", str(SERVER), "--model", str(MODEL), "--out", str(out),
        "--slots", "1", "--rates", ",".join(map(str, RATES)), "--prompt-mix", "20,40",
        "--ctx-per-slot", "1024", "--load", "3", "--drain", "20", "--every", "1",
        "--cpu", "--fake-gpu", "--source", "test",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(REPO / "agent")}
    done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    for rate in RATES:
        processed, cached = trace_prompt_tokens(out / f"sweep-s1-r{rate}.jsonl.gz")
        assert processed > 50, (rate, processed)
        # a few tokens a request may match another prompt's start (the BOS, a word);
        # a repeated prompt would come whole from the cache
        assert cached < 0.1 * processed, (rate, processed, cached)
