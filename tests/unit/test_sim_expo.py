"""The simulator's vLLM exposition against the reference doc, in every format.

The expected names, types, labels and bucket boundaries are read from the
tables of ``../shared/reference/vllm-metrics.md``; the exposition is produced by
the real writer fed by a real engine core (virtual time) and parsed with
prometheus_client's own parser.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from tests.support.proc import SHARED

from inferwatch.sim.config import SimConfig
from inferwatch.sim.engine import EngineCore, SimRequest
from inferwatch.sim.expo import create_writer, formats
from inferwatch.sim.expo.vllm import VllmWriter
from inferwatch.sim.stats import HttpRecord

DOC = SHARED / "reference" / "vllm-metrics.md"
MODEL = "sim-test"


# --- the reference doc, read as data -------------------------------------------------------
@dataclass
class Expected:
    name: str  # as exposed (counters with _total)
    type: str
    labels: set[str]
    buckets: list[float] | None = None
    notes: str = ""
    bucket_rule: str = ""
    extra: dict[str, str] = field(default_factory=dict)


def _doc_text() -> str:
    if not DOC.exists():
        pytest.skip(f"reference doc {DOC} is absent (it lives in the shared folder, not the repo)")
    return DOC.read_text()


def _split_names(cell: str) -> list[str]:
    """Names in a table cell: `a / b`, `a, _x_, _y_seconds`, `x_{a,b}_total`, `n{l1,l2}`."""
    cell = cell.replace("`", "").strip()
    parts: list[str] = []
    depth = 0
    cur = ""
    for ch in cell:
        depth += ch == "{"
        depth -= ch == "}"
        if depth == 0 and ch in ",/":
            parts.append(cur.strip())
            cur = ""
        else:
            cur += ch
    parts.append(cur.strip())
    names: list[str] = []
    first = parts[0]
    for part in filter(None, parts):
        if part.startswith("_"):
            # "_inference_time_" after "vllm:request_queue_time_seconds"
            head = first.split("_")[0]
            tail = first.rsplit("_", 1)[1]
            part = head + part + (tail if part.endswith("_") else "")
        m = re.fullmatch(r"(.*)\{([^}]*)\}(.*)", part)
        if m and m.group(3):  # alternation in the middle of a name
            names += [m.group(1) + alt + m.group(3) for alt in m.group(2).split(",")]
        else:
            names.append(part)
    return names


def expected_families() -> list[Expected]:
    text = _doc_text()
    section = text.split("## Current metrics", 1)[1].split("\n## ", 1)[0]
    out: list[Expected] = []
    for line in section.splitlines():
        if not (line.startswith("| vllm:") or line.startswith("| http_")):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        names, typ, notes = _split_names(cells[0]), cells[1], cells[2]
        for raw in names:
            labels_m = re.fullmatch(r"([^{]+)\{([^}]*)\}", raw)
            name = labels_m.group(1) if labels_m else raw
            if "*" in name or typ == "various" or name == "vllm:lora_requests_info":
                continue  # optional features the simulated worker does not enable
            if typ.startswith("counter / histogram"):
                kind = "counter" if name.endswith("_total") else "histogram"
            else:
                kind = typ.split()[0]
            if labels_m:
                labels = set(labels_m.group(2).split(","))
            elif only := re.search(r"labels `([^`]+)` only", notes):
                labels = {x.strip() for x in only.group(1).split(",")}
            elif name.startswith("http_"):
                labels = {"handler", "method"}
            elif "CacheConfig field" in notes:
                # "...: block_size, num_gpu_blocks, ..., ... + engine": at least these
                listed = notes.split(":", 1)[1].replace("+", ",")
                labels = {x.strip(" `") for x in listed.split(",")} - {"...", ""}
            else:
                labels = {"model_name", "engine"} | set(re.findall(r"\+ `(\w+)`", notes))
            out.append(Expected(name, kind, labels, notes=notes))
    by_name = {e.name: e for e in out}
    for e in out:
        if e.type != "histogram":
            continue
        notes = e.notes
        if m := re.match(r"(?:one observation[^;]*; )?buckets ([\d. ]+)", notes):
            e.buckets = [float(x) for x in m.group(1).split()]
        elif re.fullmatch(r"[\d ]+", notes):
            e.buckets = [float(x) for x in notes.split()]
        elif "1-2-5 buckets up to max_model_len" in notes:
            e.bucket_rule = "1-2-5"
        elif "..." in notes:
            e.bucket_rule = notes
    for e in out:
        if e.type == "histogram" and e.buckets is None and "same buckets as" in e.notes:
            ref = e.notes.split("same buckets as", 1)[1].strip().split()[0]
            source = {
                "ITL": "vllm:inter_token_latency_seconds",
                "e2e": "vllm:e2e_request_latency_seconds",
            }[ref]
            e.buckets = by_name[source].buckets
    return out


def test_doc_parser_reads_the_tables() -> None:
    fams = {e.name: e for e in expected_families()}
    assert len(fams) >= 35
    assert (
        fams["vllm:request_decode_time_seconds"].buckets
        == fams["vllm:e2e_request_latency_seconds"].buckets
    )
    assert fams["vllm:admission_rejections_total"].labels == {"model_name", "reason"}
    assert fams["vllm:num_requests_waiting_by_reason"].labels == {"model_name", "engine", "reason"}
    assert fams["http_requests_total"].labels == {"handler", "method", "status"}
    assert fams["vllm:cache_config_info"].labels == {
        "block_size",
        "num_gpu_blocks",
        "gpu_memory_utilization",
        "cache_dtype",
        "enable_prefix_caching",
        "engine",
    }


# --- expositions from a writer fed by an engine ----------------------------------------------
def _traffic_writer(cfg: SimConfig) -> tuple[VllmWriter, list[EngineCore]]:
    """A writer after some real engine traffic: finished, running and waiting requests."""
    writer = create_writer(cfg)
    assert isinstance(writer, VllmWriter)
    cores = [EngineCore(cfg, i, writer.on_step) for i in range(cfg.data_parallel)]
    shared = list(range(5000, 5000 + 64))
    now = 0.0
    for core in cores:
        for i in range(cfg.max_num_seqs + 8):
            core.add_request(
                SimRequest(
                    request_id=f"{core.index}-{i}",
                    prompt_ids=shared + [core.index * 1000 + i] * 20,
                    max_tokens=3 if i < 4 else 50,
                    target_tokens=3 if i < 4 else 50,
                    final_reason="length",
                    arrival=now,
                    max_tokens_param=3 if i < 4 else 50,
                )
            )
        for _ in range(8):  # some finish, the rest stay running or waiting
            plan = core.schedule(now)
            assert plan is not None
            now += plan.seconds
            core.complete(plan, now)
    writer.on_http(HttpRecord("/v1/chat/completions", "POST", 200, 0.2, 100, 0))
    writer.on_http(HttpRecord("/metrics", "GET", 200, 0.001))  # excluded, as in vLLM
    if cfg.max_queued_requests is not None:
        writer.on_rejection("max_num_queued_reqs")
    return writer, cores


def _families(cfg: SimConfig, accept: str = "") -> dict[str, Metric]:
    writer, cores = _traffic_writer(cfg)
    expo = writer.render([c.snapshot() for c in cores], accept)
    return {f.name: f for f in text_string_to_metric_families(expo.body.decode())}


def _label_names(fam: Metric) -> set[str]:
    return {k for s in fam.samples for k in s.labels if k not in ("le", "quantile")}


def _buckets(fam: Metric) -> list[float]:
    les = []
    for s in fam.samples:
        if s.name.endswith("_bucket") and s.labels.get("engine", "0") == "0":
            les.append(float(s.labels["le"]))
    return sorted(set(les))


def _family_name(e: Expected) -> str:
    return e.name[: -len("_total")] if e.type == "counter" else e.name


def _samples(fams: dict[str, Metric]) -> Iterator[tuple[str, dict[str, str], float]]:
    for fam in fams.values():
        for s in fam.samples:
            yield s.name, s.labels, s.value


V1 = SimConfig(model=MODEL, max_queued_requests=4, cold_start_requests=0)


def test_v1_matches_reference_names_types_labels_and_buckets() -> None:
    fams = _families(V1)
    for e in expected_families():
        fam = fams.get(_family_name(e))
        assert fam is not None, f"{e.name} missing from the exposition"
        assert fam.type == e.type, f"{e.name}: type {fam.type}, doc says {e.type}"
        if fam.samples:
            if e.name == "vllm:cache_config_info":  # every field: the doc names some
                assert e.labels <= _label_names(fam), f"{e.name}: {_label_names(fam)}"
            else:
                assert _label_names(fam) == e.labels, f"{e.name}: {_label_names(fam)} != {e.labels}"
        if e.type == "histogram" and not e.name.startswith("http_"):
            got = _buckets(fam)
            assert got[-1] == math.inf
            if e.buckets is not None:
                assert got[:-1] == e.buckets, f"{e.name}: buckets {got}"
            elif e.bucket_rule == "1-2-5":
                assert got[:-1] == [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000], e.name
            else:  # "1 8 16 ... 16384"
                first, last = e.bucket_rule.split("...")
                head = [float(x) for x in first.split()]
                assert got[: len(head)] == head and got[-2] == float(last.split()[0]), e.name


def test_v1_counters_and_histograms_have_created_samples() -> None:
    fams = _families(V1)
    for fam in fams.values():
        if fam.type in ("counter", "histogram") and fam.name.startswith("vllm:") and fam.samples:
            assert f"{fam.name}_created" in fams, f"{fam.name} has no _created"
    assert "python_gc_objects_collected" in fams and "process_cpu_seconds" in fams
    # iteration_tokens_total is a histogram whose base name ends in _total
    assert fams["vllm:iteration_tokens_total"].type == "histogram"


def test_v1_values_follow_the_traffic() -> None:
    writer, cores = _traffic_writer(V1)
    expo = writer.render([c.snapshot() for c in cores])
    fams = {f.name: f for f in text_string_to_metric_families(expo.body.decode())}
    success = {
        s.labels["finished_reason"]: s.value
        for s in fams["vllm:request_success"].samples
        if s.name.endswith("_total")
    }
    assert set(success) == {"stop", "length", "abort", "error", "repetition"}  # pre-created
    assert success["length"] == 4 and success["stop"] == 0
    waiting = {
        s.labels["reason"]: s.value for s in fams["vllm:num_requests_waiting_by_reason"].samples
    }
    total_waiting = fams["vllm:num_requests_waiting"].samples[0].value
    assert total_waiting == len(cores[0].waiting) > 0
    assert sum(waiting.values()) == total_waiting
    running = fams["vllm:num_requests_running"].samples[0].value
    assert running == len(cores[0].running) == V1.max_num_seqs
    kv = fams["vllm:kv_cache_usage_perc"].samples[0].value
    assert kv == pytest.approx(cores[0].pool.usage) and kv > 0
    hits = fams["vllm:prefix_cache_hits"].samples[0].value
    queries = fams["vllm:prefix_cache_queries"].samples[0].value
    assert 0 < hits < queries  # requests after the first hit the shared 64-token prefix
    by_source = {
        s.labels["source"]: s.value
        for s in fams["vllm:prompt_tokens_by_source"].samples
        if s.name.endswith("_total")
    }
    prompt = fams["vllm:prompt_tokens"].samples[0].value
    assert by_source["local_compute"] + by_source["local_cache_hit"] == prompt
    rejections = [s for s in fams["vllm:admission_rejections"].samples if s.name.endswith("_total")]
    assert [(s.labels, s.value) for s in rejections] == [
        ({"model_name": MODEL, "reason": "max_num_queued_reqs"}, 1.0)
    ]
    http = [s for s in fams["http_requests"].samples if s.name == "http_requests_total"]
    assert [(s.labels["handler"], s.labels["status"]) for s in http] == [
        ("/v1/chat/completions", "2xx")
    ]
    info = fams["vllm:cache_config_info"].samples[0].labels
    assert info["block_size"] == "16" and info["num_gpu_blocks"] == str(V1.blocks)
    assert info["gpu_memory_utilization"] == "0.95" and info["enable_prefix_caching"] == "True"
    assert info["cache_dtype"] == "auto" and info["engine"] == "0"


def test_v0_format_has_old_names_model_label_only_and_no_created() -> None:
    fams = _families(dataclasses.replace(V1, format="v0"))
    for name in (
        "vllm:gpu_cache_usage_perc",
        "vllm:gpu_prefix_cache_queries",
        "vllm:gpu_prefix_cache_hits",
        "vllm:time_per_output_token_seconds",
        "vllm:gpu_prefix_cache_hit_rate",
        "vllm:num_requests_swapped",
        "vllm:avg_prompt_throughput_toks_per_s",
        "vllm:time_to_first_token_seconds",
        "vllm:num_requests_waiting",
        "vllm:num_preemptions",
    ):
        assert name in fams, name
    for gone in (
        "vllm:kv_cache_usage_perc",
        "vllm:prefix_cache_queries",
        "vllm:inter_token_latency_seconds",
        "vllm:num_requests_waiting_by_reason",
    ):
        assert gone not in fams, gone
    for name, labels, _ in _samples(fams):
        assert not name.endswith("_created"), name
        assert "engine" not in labels, name
        if name.startswith("vllm:") and name != "vllm:cache_config_info":
            assert labels.get("model_name") == MODEL, name
    assert fams["vllm:gpu_prefix_cache_hits"].samples[0].value > 0


def test_multiprocess_format_duplicates_kv_usage_per_pid() -> None:
    cfg = dataclasses.replace(V1, format="multiprocess")
    writer, cores = _traffic_writer(cfg)
    body = writer.render([c.snapshot() for c in cores]).body.decode()
    fams = {f.name: f for f in text_string_to_metric_families(body)}
    assert not any(n.startswith(("python_", "process_")) for n in fams)
    assert not any(name.endswith("_created") for name, _, _ in _samples(fams))
    kv = fams["vllm:kv_cache_usage_perc"].samples
    assert len(kv) == 3 and len({s.labels["pid"] for s in kv}) == 3
    values = sorted(s.value for s in kv)
    assert values[:2] == [0.0, 0.0]
    assert values[2] == pytest.approx(cores[0].pool.usage) and values[2] > 0
    real = next(s for s in kv if s.value > 0)
    assert real.labels["pid"] == str(writer.pid)
    assert "pid" not in fams["vllm:num_requests_running"].samples[0].labels


def test_data_parallel_gives_one_series_per_engine() -> None:
    fams = _families(dataclasses.replace(V1, data_parallel=3))
    for name in ("vllm:num_requests_running", "vllm:kv_cache_usage_perc", "vllm:cache_config_info"):
        assert sorted(s.labels["engine"] for s in fams[name].samples) == ["0", "1", "2"], name
    ttft_counts = [
        s for s in fams["vllm:time_to_first_token_seconds"].samples if s.name.endswith("_count")
    ]
    assert sorted(s.labels["engine"] for s in ttft_counts) == ["0", "1", "2"]
    assert all(s.value > 0 for s in ttft_counts)


def test_disable_log_stats_removes_every_vllm_series() -> None:
    fams = _families(dataclasses.replace(V1, disable_log_stats=True))
    assert not [n for n in fams if n.startswith("vllm:")]
    assert "http_requests" in fams and "process_cpu_seconds" in fams


def test_text_format_0_0_4_whatever_the_accept_header() -> None:
    writer, cores = _traffic_writer(V1)
    expo = writer.render(
        [c.snapshot() for c in cores], "application/openmetrics-text;version=1.0.0"
    )
    assert expo.content_type == "text/plain; version=0.0.4; charset=utf-8"
    fams = {f.name: f for f in text_string_to_metric_families(expo.body.decode())}
    assert fams["vllm:prefix_cache_hits"].type == "counter"


def test_writer_registry_knows_formats_and_rejects_unknown_ones() -> None:
    from inferwatch.errors import ConfigError

    assert formats("vllm") == ("v1", "v0", "multiprocess")
    with pytest.raises(ConfigError, match="--format"):
        create_writer(dataclasses.replace(V1, format="v9"))
    with pytest.raises(ConfigError, match="--engine"):
        create_writer(dataclasses.replace(V1, engine="nosuch"))
