"""A ninth engine needs its table and its simulator module, nothing else (issue 41 step 4).

The package is copied with only ``engines/ninth.py`` and ``sim/expo/ninth.py``
added (tests/support/planted.py); a Python process on that copy then asks every
part that knows engines about it: the registry, the agent's configuration,
launch flags, pod recognition, self-descriptions, the exposition's mapping, the
warm-up bounds, the SLO check, the rules' own-histogram branches and the
simulator's writers. Each answer can only come from the two planted files.
The copy with the real engines only answers for none of it (``baseline``), so
every check below can fail.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from tests.support import planted
from tests.support.kubeapi import make_pod
from tests.support.proc import REPO

# Run on the copy; prints one JSON object of what each part answered for the engine.
PROBE = r"""
import json, sys
from pathlib import Path

import inferwatch
from inferwatch.agent.collectors import podworkers, selfdesc
from inferwatch.agent.collectors.warmup import WARMUP_TTFT_BOUNDS
from inferwatch.agent.config import load_config
from inferwatch.engines import ENGINES, detect, metrics_locations
from inferwatch.engines.launchflags import parse_launch
from inferwatch.engines.mapping import family_names, map_exposition
from inferwatch.errors import ConfigError
from inferwatch.pack.rules import own_histograms
from inferwatch.pack.thresholds import load_thresholds
from inferwatch.sim import expo
from inferwatch.sim.config import SimConfig
from inferwatch.sim.stats import EngineSnapshot, FinishedRequest, StepStats

NAME, POD, SLO, BAD_SLO = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3], sys.argv[4]
out = {"package": str(Path(inferwatch.__file__).parent), "engines": list(ENGINES)}


def attempt(key, call):
    try:
        out[key] = call()
    except (ConfigError, KeyError, ValueError) as exc:
        out[key] = "error: " + str(exc)


def config():
    cfg = load_config(flags={"workers": [f"w=http://127.0.0.1:9001"]}, env={})
    raw = {"workers": [{"name": "w", "url": "http://127.0.0.1:9001", "engine": NAME}]}
    path = Path(SLO).with_name("agent.yaml")
    path.write_text(json.dumps(raw))
    return load_config(str(path), env={}).workers[0].engine


attempt("config", config)


def launch(argv):
    info = parse_launch(argv)
    if info is None:
        return None
    return [info.engine, info.model, info.port, info.max_num_seqs, info.prefix_caching]


out["launch"] = launch(["ninth-server", "up", "--weights", "m", "--listen-port", "9001",
                        "--slots", "12", "--cache"])
out["launch_module"] = launch(["python3", "-m", "ninth.server", "up", "--slots=7"])
out["launch_no_subcommand"] = launch(["ninth-server", "--slots", "7"])

workers, skipped = podworkers.pod_workers(POD)
out["pod"] = [[w.spec.engine, w.spec.url] for w in workers]
annotated = dict(POD, metadata=dict(POD["metadata"], annotations={
    "inferwatch.io/scrape": "true", "inferwatch.io/engine": NAME, "inferwatch.io/port": "8123"}))
workers, skipped = podworkers.pod_workers(annotated)
out["pod_annotated"] = [[w.spec.engine, w.spec.url] for w in workers]
out["pod_skipped"] = skipped.reason if skipped else None

d = selfdesc.describe(NAME, b'{"release": "9.1", "version": "0", "served": "m", "slots": 12}')
out["selfdesc"] = [selfdesc.ENDPOINTS[NAME].path if NAME in selfdesc.ENDPOINTS else None,
                   d.version, d.model, d.max_num_seqs]

def simulate():
    got = {"formats": list(expo.formats(NAME))}
    writer = expo.create_writer(SimConfig(engine=NAME, format="v1", model="m"))
    finished = FinishedRequest(
        finish_reason="stop", prompt_tokens=10, generation_tokens=4, cached_tokens=0,
        max_tokens_param=4, e2e=1.0, queue_time=0.1, prefill_time=0.2, decode_time=0.6,
        inference_time=0.8, mean_tpot=0.2, preemptions=0)
    writer.on_step(0, StepStats(engine=0, prompt_tokens=10, cached_prompt_tokens=0,
        generation_tokens=4, preemptions=0, ttfts=(3.0,), itls=(0.1,), finished=(finished,)))
    snapshot = EngineSnapshot(engine=0, running=2, waiting=5, kv_usage=0.1, blocks_in_use=1,
                              num_gpu_blocks=10, max_num_seqs=8)
    text = writer.render([snapshot]).body.decode()
    table = detect(family_names(text))
    mapped = map_exposition(text, table)
    return dict(
        got,
        path=writer.metrics_path,
        detected=table.name,
        gauges={t: sorted(s.values()) for t, s in mapped.gauges.items()},
        counters=sorted(mapped.counters),
        histograms=sorted(mapped.histograms),
    )


attempt("sim", simulate)
out["locations"] = [path for _, path in metrics_locations("http://h:1")]

out["warmup_bounds"] = [b for b in (3.5, 35.0) if b in WARMUP_TTFT_BOUNDS]


def slo(path):
    spec = load_thresholds(path).slos
    return [[e.model, list(e.engines), e.get("ttft").le, e.get("availability").objective]
            for e in spec.entries]


attempt("slo", lambda: slo(SLO))
attempt("slo_off_boundary", lambda: slo(BAD_SLO))

t = load_thresholds()
out["own_histograms"] = list(own_histograms.ENGINES)
out["own_histogram_rates"] = own_histograms.engine_bucket_rates(
    t, "inferwatch_ttft_seconds", engines=(NAME,))
print(json.dumps(out))
"""

SLO = """
slos:
  models:
    m:
      engine: [{engine}]
      ttft: {{threshold_seconds: {threshold}, objective: 0.99}}
      tpot: null
      availability: {{objective: 0.995}}
"""

POD = make_pod(
    "ninth-0",
    uid="5b1f0c2e-1d3a-4e8b-9f00-0123456789ab",
    ip="10.1.2.3",
    containers=[{"name": "server", "image": "example.org/ninth:2.0", "args": ["--slots", "4"]}],
)


def probe(source_root: Path, tmp: Path) -> dict[str, Any]:
    good, bad = tmp / "slo.yaml", tmp / "slo-off.yaml"
    good.write_text(SLO.format(engine=planted.NAME, threshold=3.5))
    bad.write_text(SLO.format(engine=planted.NAME, threshold=3.0))
    done = subprocess.run(
        [sys.executable, "-c", PROBE, planted.NAME, json.dumps(POD), str(good), str(bad)],
        env={"PATH": "/usr/bin:/bin", **planted.env(source_root)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    answer: dict[str, Any] = json.loads(done.stdout)
    return answer


@pytest.fixture(scope="module")
def planted_answers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("planted")
    return probe(planted.planted_tree(tmp), tmp)


@pytest.fixture(scope="module")
def baseline(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The same questions asked of the package without the two files."""
    tmp = tmp_path_factory.mktemp("baseline")
    return probe(REPO / "agent", tmp)


def test_the_copy_is_what_runs(planted_answers: dict[str, Any]) -> None:
    assert planted_answers["package"] != str(REPO / "agent" / "inferwatch")
    assert planted_answers["package"].endswith("agent/inferwatch")


def test_the_registry_lists_it_last(planted_answers: dict[str, Any]) -> None:
    engines = planted_answers["engines"]
    assert engines[-1] == planted.NAME
    assert engines[:-1] == [
        "vllm", "sglang", "tgi", "llamacpp", "triton", "trtllm", "nim", "lmdeploy",
    ]  # fmt: skip


def test_the_agent_configuration_accepts_it(planted_answers: dict[str, Any]) -> None:
    assert planted_answers["config"] == planted.NAME


def test_its_launch_flags_are_read(planted_answers: dict[str, Any]) -> None:
    assert planted_answers["launch"] == [planted.NAME, "m", 9001, 12, "true"]
    assert planted_answers["launch_module"] == [planted.NAME, None, None, 7, "unknown"]
    # the launcher's sub-command is required, as its table says
    assert planted_answers["launch_no_subcommand"] is None


def test_its_pods_are_recognised(planted_answers: dict[str, Any]) -> None:
    assert planted_answers["pod"] == [[planted.NAME, f"http://10.1.2.3:{planted.POD_PORT}"]]
    assert planted_answers["pod_annotated"] == [[planted.NAME, "http://10.1.2.3:8123"]]
    assert planted_answers["pod_skipped"] is None


def test_its_self_description_is_read_by_its_keys(planted_answers: dict[str, Any]) -> None:
    assert planted_answers["selfdesc"] == ["/version", "9.1", "m", 12]


def test_the_simulator_serves_it_and_the_mapping_reads_it(
    planted_answers: dict[str, Any],
) -> None:
    assert planted_answers["sim"] == {
        "formats": ["v1"],
        "path": planted.METRICS_PATH,
        "detected": planted.NAME,
        "gauges": {"inferwatch_queue_depth": [5.0], "inferwatch_requests_running": [2.0]},
        "counters": ["inferwatch_requests_finished"],
        "histograms": ["inferwatch_tpot_seconds", "inferwatch_ttft_seconds"],
    }
    assert planted.METRICS_PATH in planted_answers["locations"]


def test_the_warmup_histogram_has_its_bounds(planted_answers: dict[str, Any]) -> None:
    assert planted_answers["warmup_bounds"] == [3.5, 35.0]


def test_the_slo_spec_checks_it_against_its_buckets(planted_answers: dict[str, Any]) -> None:
    assert planted_answers["slo"][0] == ["m", [planted.NAME], 3.5, 0.995]
    refused = planted_answers["slo_off_boundary"]
    assert refused.startswith("error: ")
    assert f"{planted.NAME}'s TTFT histogram" in refused and "0.5 or 3.5" in refused


def test_the_rules_read_its_own_histograms(planted_answers: dict[str, Any]) -> None:
    assert planted_answers["own_histograms"] == ["vllm", "sglang", planted.NAME]
    (rate,) = planted_answers["own_histogram_rates"]
    assert "ninth:ttft_seconds_bucket" in rate
    assert f'"engine", "{planted.NAME}"' in rate


def test_without_the_two_files_nothing_knows_it(baseline: dict[str, Any]) -> None:
    # the probe is not vacuous: every part asked of the real package says "no such engine"
    assert baseline["package"] == str(REPO / "agent" / "inferwatch")
    assert planted.NAME not in baseline["engines"]
    for key in ("config", "sim", "slo", "slo_off_boundary"):
        assert baseline[key].startswith("error: "), (key, baseline[key])
    assert baseline["config"].endswith(repr(planted.NAME)) or planted.NAME in baseline["config"]
    assert baseline["launch"] is None and baseline["launch_module"] is None
    assert baseline["pod"] == []
    assert baseline["pod_annotated"] == []
    assert "is not one of" in baseline["pod_skipped"]
    assert baseline["selfdesc"] == [None, None, None, None]
    assert planted.METRICS_PATH not in baseline["locations"]
    assert baseline["warmup_bounds"] == []
    assert baseline["own_histograms"] == ["vllm", "sglang"]
    assert baseline["own_histogram_rates"] == []
