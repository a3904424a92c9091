"""``advise`` and ``advise --what-if`` refuse what they can refuse before they watch a span.

Issue 40: the README's own example (``--what-if max-num-seqs=48`` against the demo's
two workers) watched its whole 60 s span to say "give --worker", then 60 s more to say
48 is far past the largest batch. Here a real agent watches two real simulators (the
demo's pair) and every refusal must come as one line with exit 2, long before the span
it would have watched (a generous guard: the command's own start-up is included).
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.agentrun import AgentRun
from tests.support.proc import Process, free_port, http_get, inferwatch_cmd, wait_until

from inferwatch.advise.agent import parse_exposition
from inferwatch.advise.twin import NotEnough
from inferwatch.advise.whatif import EXTRAPOLATE_MAX, precheck
from inferwatch.errors import ConfigError, UsageError

WORKERS = ("worker-a", "worker-b")
SLOTS = 20
#: the span a what-if watches by default, and a long one for plain advise
SPAN = 60.0
#: every refusal returns well before the span (start-up of a fresh interpreter included)
GUARD = SPAN / 2


@pytest.fixture(scope="module")
def agent_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    tmp = tmp_path_factory.mktemp("refusals")
    state = tmp / "gpus"
    procs: list[Process] = []
    urls = {}
    try:
        for index, name in enumerate(WORKERS):
            port = free_port()
            urls[name] = f"http://127.0.0.1:{port}"
            procs.append(
                Process(
                    inferwatch_cmd(
                        "simulate", "--port", str(port), "--model", "demo-pair",
                        "--max-num-seqs", str(SLOTS), "--gpu-state-dir", str(state),
                        "--gpu-index", str(index), "--cold-start-requests", "0",
                    ),
                    tmp / f"sim-{name}.log",
                )
            )  # fmt: skip
        agent = AgentRun(
            tmp,
            "--gpu-backend", "fake", "--fake-gpus", str(len(WORKERS)),
            "--fake-gpu-state", str(state), "--collect-interval", "500ms",
            *(a for name, url in urls.items() for a in ("--worker", f"{name}={url}")),
            ready=None,
        )  # fmt: skip
        procs.append(agent.process)

        def ready() -> bool:
            status, body, _ = http_get(f"{agent.url}/metrics", timeout=2)
            text = body.decode()
            # both workers' engine data: what --what-if reads at its first scrape
            return (
                status == 200
                and text.count("inferwatch_max_num_seqs{") == len(WORKERS)
                and text.count("inferwatch_generation_tokens_total{") == len(WORKERS)
            )

        wait_until(ready, timeout=90, message="the agent watching both simulators")
        yield agent.url
    finally:
        for p in procs:
            p.stop()


def refused(*args: str) -> tuple[str, float]:
    """Run ``advise ARGS``; it must exit 2 with one line on stderr. (line, seconds)."""
    began = time.monotonic()
    done = subprocess.run(
        inferwatch_cmd("advise", *args), capture_output=True, text=True, timeout=SPAN * 3
    )
    took = time.monotonic() - began
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    assert len(lines) == 1, done.stderr
    assert done.stdout == ""
    return lines[0], took


@pytest.mark.parametrize(
    ("what_if", "needle"),
    [
        ("max-num-seqs=x", "a number for max-num-seqs"),
        ("max-num-seqs=0", "a whole number of at least 1"),
        ("nonsense=3", "FLAG=VALUE with FLAG one of"),
        ("gpu-memory-utilization=1.5", "in (0, 1]"),
    ],
)
def test_bad_what_if_input_is_refused_without_reading_anything(what_if: str, needle: str) -> None:
    # no agent answers on this port: the input is refused before it is looked for
    line, took = refused("--agent-url", f"http://127.0.0.1:{free_port()}", "--what-if", what_if)
    assert line.startswith("inferwatch advise: error: ") and needle in line and "--what-if" in line
    assert took < GUARD


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (("--phase", "steady"), "--phase needs --trace FILE"),
        (("--instance", "h:1"), "--instance needs --prometheus-url"),
        (("--span", "0s"), "--span"),
        (("--output-tokens", "-3"), "--output-tokens"),
    ],
)
def test_arguments_of_no_use_to_the_source_are_refused_at_once(
    extra: tuple[str, ...], needle: str
) -> None:
    port = free_port()
    line, took = refused(
        "--agent-url", f"http://127.0.0.1:{port}", "--what-if", "max-num-seqs=24", *extra
    )
    assert needle in line and took < GUARD


def test_a_missing_worker_is_refused_at_the_first_scrape(agent_url: str) -> None:
    """The README's example against the demo's pair: 'give --worker', before the span."""
    line, took = refused("--agent-url", agent_url, "--what-if", "max-num-seqs=48")
    assert "give --worker: the samples have 2 workers (worker-a, worker-b)" in line
    assert took < GUARD, took
    line, took = refused(
        "--agent-url", agent_url, "--what-if", "max-num-seqs=24", "--worker", "nobody"
    )
    assert "--worker" in line and "worker-a, worker-b" in line and took < GUARD


def test_a_slot_count_the_span_cannot_fit_is_refused_at_the_first_scrape(agent_url: str) -> None:
    line, took = refused(
        "--agent-url", agent_url, "--what-if", "max-num-seqs=48", "--worker", "worker-a"
    )
    assert f"max-num-seqs=48 is 2.4x its {SLOTS} slots" in line, line
    assert f"max-num-seqs={int(SLOTS * EXTRAPOLATE_MAX)} at most" in line
    assert took < GUARD, took


def test_plain_advise_refuses_an_unknown_worker_before_its_samples(agent_url: str) -> None:
    # three samples 30 s apart: a 60 s span the refusal must not wait for
    line, took = refused(
        "--agent-url", agent_url, "--samples", "3", "--every", "30s", "--worker", "nobody"
    )
    assert "--worker" in line and "worker-a, worker-b" in line
    assert took < GUARD, took


def test_shadow_refuses_an_unknown_worker_before_its_span(agent_url: str, tmp_path: Path) -> None:
    line, took = refused(
        "--agent-url", agent_url, "--shadow", str(tmp_path / "s.json"), "--worker", "nobody"
    )
    assert "--worker" in line and took < GUARD


def test_precheck_reads_one_scrape() -> None:
    """The first scrape's refusals, without a span: they can fail (a fitting question passes)."""

    def agent_text(engine: str = "vllm", finished: bool = True, gmu: str = "0.9") -> str:
        lab = f'worker="w",model="m",engine="{engine}"'
        lines = [
            f'inferwatch_worker_info{{worker="w",engine="{engine}",max_num_seqs="16",'
            f'gpu_memory_utilization="{gmu}"}} 1',
            f"inferwatch_generation_tokens_total{{{lab}}} 10",
            f"inferwatch_requests_running{{{lab}}} 2",
            f"inferwatch_max_num_seqs{{{lab}}} 16",
        ]
        if finished:
            lines.append(f"inferwatch_requests_finished_total{{{lab}}} 3")
        return "\n".join(lines) + "\n"

    scrape = parse_exposition(agent_text())
    assert precheck(scrape, None, ("max-num-seqs", 32)) == "w"
    with pytest.raises(NotEnough, match=r"2\.1x its 16 slots"):
        precheck(scrape, None, ("max-num-seqs", 33))
    with pytest.raises(ConfigError, match="--worker"):
        precheck(scrape, "v", None)
    with pytest.raises(NotEnough, match="give --output-tokens"):
        precheck(parse_exposition(agent_text(finished=False)), None, None)
    assert precheck(parse_exposition(agent_text(finished=False)), None, None, 100.0) == "w"
    with pytest.raises(ConfigError, match=r"llama\.cpp"):
        precheck(
            parse_exposition(agent_text(engine="llamacpp")), "w", ("gpu-memory-utilization", 0.8)
        )
    two = parse_exposition(agent_text() + agent_text().replace('worker="w"', 'worker="x"'))
    with pytest.raises(UsageError, match="give --worker"):
        precheck(two, None, None)
