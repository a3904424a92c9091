"""The measuring proxy in front of the real llama-server (issue 30 item 4).

llama.cpp exports no latency histogram. With ``workers[].proxy`` the agent
measures each streamed completion on its way to the client and exports TTFT,
TPOT and end-to-end histograms under the contract's names; here they must
agree with what a streaming client measured itself, within one bucket, and a
client that goes away must free the server's slot.
"""

from __future__ import annotations

import http.client
import itertools
import json
import math
import time
from pathlib import Path

import pytest
from tests.support.llamaserver import proxied
from tests.support.proc import http_get, wait_until

from inferwatch.engines.proxy import TPOT_BUCKETS, TTFT_BUCKETS
from inferwatch.stats import window_quantiles

pytestmark = pytest.mark.slow

PROMPT = "Write a long story about a lighthouse keeper and the sea."


@pytest.fixture
def stack(tmp_path: Path):  # type: ignore[no-untyped-def]
    with proxied(tmp_path, ["--metrics", "--parallel", "2", "-a", "tiny-alias"]) as parts:
        server, agent, proxy_port = parts
        url = agent.url
        wait_until(lambda: 'model="tiny-alias"' in http_get(url + "/metrics")[1].decode(), 60,
                   message="the agent reading llama-server")  # fmt: skip
        yield server, url, proxy_port


def stream(port: int, n: int) -> tuple[float, list[float]]:
    """One streamed completion through the proxy: the client's TTFT and token gaps."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    body = json.dumps({"prompt": PROMPT, "max_tokens": n, "stream": True, "ignore_eos": True})
    started = time.monotonic()
    conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    resp = conn.getresponse()
    assert resp.status == 200
    times: list[float] = []
    while True:
        line = resp.readline()
        if not line:
            break
        if line.startswith(b"data:") and line.strip() != b"data: [DONE]":
            doc = json.loads(line[5:])
            if any(c.get("text") for c in doc.get("choices", [])):
                times.append(time.monotonic())
    conn.close()
    # a token whose text is not yet whole UTF-8 comes with an empty text: not an event
    assert len(times) >= n // 2
    return times[0] - started, [b - a for a, b in itertools.pairwise(times)]


def agent_buckets(url: str, family: str) -> tuple[tuple[float, ...], list[float]]:
    text = http_get(url + "/metrics")[1].decode()
    bounds: list[float] = []
    counts: list[float] = []
    for line in text.splitlines():
        if line.startswith(f"{family}_bucket{{") and 'worker="llama"' in line:
            le = line.split('le="', 1)[1].split('"', 1)[0]
            bounds.append(math.inf if le == "+Inf" else float(le))
            counts.append(float(line.rsplit(" ", 1)[1]))
    return tuple(bounds), counts


def bucket_of(bounds: tuple[float, ...], value: float) -> int:
    return next(i for i, b in enumerate((*bounds, math.inf)) if value <= b)


def client_quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1)]


def test_ttft_and_tpot_agree_with_a_streaming_client_within_one_bucket(stack) -> None:  # type: ignore[no-untyped-def]
    server, url, proxy_port = stack
    ttfts: list[float] = []
    gaps: list[float] = []
    for _ in range(8):
        ttft, g = stream(proxy_port, 24)
        ttfts.append(ttft)
        gaps += g
    wait_until(
        lambda: sum(agent_buckets(url, "inferwatch_ttft_seconds")[1][-1:]) == 8, 10,
        message="the agent's eight TTFT observations",
    )  # fmt: skip
    for family, mine, own_bounds in (
        ("inferwatch_ttft_seconds", ttfts, TTFT_BUCKETS),
        ("inferwatch_tpot_seconds", gaps, TPOT_BUCKETS),
    ):
        bounds, counts = agent_buckets(url, family)
        assert bounds[:-1] == own_bounds and counts[-1] == len(mine), (family, counts)
        agent_q = window_quantiles(bounds, counts, (0.5, 0.95))
        for q in (0.5, 0.95):
            theirs = bucket_of(own_bounds, agent_q[q])
            ours = bucket_of(own_bounds, client_quantile(mine, q))
            assert abs(theirs - ours) <= 1, (family, q, agent_q[q], client_quantile(mine, q))
    # end to end and the tokens too; the proxy's own families name the same worker
    text = http_get(url + "/metrics")[1].decode()
    labels = 'engine="llamacpp",model="tiny-alias",worker="llama"'
    assert f"inferwatch_e2e_latency_seconds_count{{{labels}}} 8.0" in text
    assert f"inferwatch_proxy_ttft_seconds_count{{{labels}}} 8.0" in text
    # the answers' usage, as the server counted them itself
    predicted = next(
        float(line.split()[-1]) for line in server.metrics_text().splitlines()
        if line.startswith("llamacpp:tokens_predicted_total")
    )  # fmt: skip
    assert predicted == 8 * 24
    assert f"inferwatch_proxy_generation_tokens_total{{{labels}}} {predicted}" in text
    # llama.cpp counts no finished requests: the proxy's finish reasons are the contract's
    finished = 'engine="llamacpp",model="tiny-alias",reason="length",worker="llama"'
    assert f"inferwatch_requests_finished_total{{{finished}}} 8.0" in text


def test_a_client_abort_frees_the_server_slot(stack) -> None:  # type: ignore[no-untyped-def]
    server, url, proxy_port = stack

    def predicted() -> float:
        for line in server.metrics_text().splitlines():
            if line.startswith("llamacpp:tokens_predicted_total"):
                return float(line.split()[-1])
        return 0.0

    def processing() -> float:
        for line in server.metrics_text().splitlines():
            if line.startswith("llamacpp:requests_processing"):
                return float(line.split()[-1])
        return -1.0

    before = predicted()
    conn = http.client.HTTPConnection("127.0.0.1", proxy_port, timeout=60)
    body = json.dumps({"prompt": PROMPT, "max_tokens": 3000, "stream": True, "ignore_eos": True})
    conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    resp = conn.getresponse()
    assert resp.status == 200
    while not resp.readline().startswith(b"data:"):
        pass
    assert processing() == 1
    resp.close()
    conn.close()  # the client goes away after its first token
    wait_until(lambda: processing() == 0, 20, message="llama-server's slot freed")
    # the slot stopped long before the 3,000 tokens asked for
    assert predicted() - before < 3000
    aborts = 'inferwatch_proxy_client_aborts_total{engine="llamacpp",model="tiny-alias",worker="llama"} 1.0'
    wait_until(lambda: aborts in http_get(url + "/metrics")[1].decode(), 10,
               message="the abort counted")  # fmt: skip
