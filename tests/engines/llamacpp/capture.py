"""Capture the real llama-server's /metrics at three moments, for the simulator's test.

Run after ``setup.sh``: ``.venv/bin/python -m tests.engines.llamacpp.capture``.
It starts the server built here with the tiny model, ``--metrics --parallel 1``,
and writes to ``tests/data/llamacpp/``:

- ``metrics-idle.txt``: just started, nothing served;
- ``metrics-during.txt``: one streamed completion has produced its first
  token and is still generating (its prompt is counted, its tokens are not);
- ``metrics-after.txt``: that request finished, then a second one with the
  same prompt (served from the slot's cache) finished too;
- ``props.json``: its ``/props`` (less the chat template), for the
  self-description reader;
- ``capture.json``: what the client counted (prompt lengths from ``/tokenize``,
  ``n_predict``), the build and the command line.

``tests/unit/test_llamacpp_capture.py`` holds the simulator's writer to these files;
``tests/live/test_llamacpp_live.py`` checks that the server built now still writes
the same families.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

from tests.support.llamaserver import (
    SERVER,
    LlamaServer,
    build_info,
    completion,
    require_server,
)
from tests.support.proc import REPO

OUT = REPO / "tests" / "data" / "llamacpp"
PROMPT = (
    "A queue that grows faster than the batch drains is a capacity problem. "
    "Each slot holds one request; when every slot is busy the next one waits."
)
#: long enough that the first /metrics call lands while the request generates
N_PREDICT_LONG = 3000
N_PREDICT_SHORT = 16


def capture(out: Path = OUT) -> dict[str, object]:
    require_server()
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        server = LlamaServer(Path(tmp), ["--metrics", "--parallel", "1"]).start()
        try:
            (out / "metrics-idle.txt").write_text(server.metrics_text())
            props = server.props()
            # the chat template and the random media marker say nothing the agent reads
            for key in ("chat_template", "media_marker"):
                props.pop(key, None)
            (out / "props.json").write_text(json.dumps(props, indent=2, sort_keys=True) + "\n")
            n_prompt = server.n_tokens(PROMPT)
            body = {**completion(PROMPT, N_PREDICT_LONG), "stream": True}
            req = urllib.request.Request(
                server.url + "/completion",
                data=json.dumps(body).encode(),
                headers={"Content-Type": "application/json"},
            )
            with urllib.request.urlopen(req, timeout=120) as resp:
                first = resp.readline()  # the first token's event: prefill is done
                if not first.startswith(b"data: "):
                    raise SystemExit(f"unexpected stream start: {first[:200]!r}")
                during = server.metrics_text()
                resp.read()  # the rest of the stream, until the request ends
            (out / "metrics-during.txt").write_text(during)
            second = server.post("/completion", completion(PROMPT, N_PREDICT_SHORT))
            (out / "metrics-after.txt").write_text(server.metrics_text())
        finally:
            server.stop()
    facts: dict[str, object] = {
        "prompt": PROMPT,
        "prompt_tokens": n_prompt,
        "n_predict": [N_PREDICT_LONG, N_PREDICT_SHORT],
        "second_request_timings": {
            k: second["timings"][k] for k in ("prompt_n", "cache_n", "predicted_n")
        },
        "build": build_info().splitlines()[:3],
        "server_args": ["--metrics", "--parallel", "1", "-c", "4096"],
        "version": server_version(),
    }
    (out / "capture.json").write_text(json.dumps(facts, indent=2) + "\n")
    return facts


def server_version() -> str:
    """The first line of the binary's ``--version``: llama.cpp's build number and commit."""
    text = subprocess.run(
        [str(SERVER), "--version"], capture_output=True, text=True, timeout=30, check=False
    ).stderr.strip()
    return text.splitlines()[0] if text else ""


if __name__ == "__main__":
    print(json.dumps(capture(), indent=2))
    sys.exit(0)
