"""Engine scrape cost: parse + normalize a vLLM exposition, against the plain parser.

Prints medians (ms) and the ratio for a single-engine worker and for eight
data-parallel engines with vLLM's optional families (speculative decoding,
KV-block residency, request-size histograms, HTTP handler histograms, Python
runtime). "Plain parser" hands the whole text to prometheus_client's
``text_string_to_metric_families``, as a generic scraper would, and then maps
the same families, so both paths produce the same result (checked).

Run: ``python bench/bench_engine_parse.py [--repeat N]``
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from prometheus_client.parser import text_string_to_metric_families
from tests.support.vllm_text import EngineValues, render

from inferwatch.engines import ENGINES
from inferwatch.engines.mapping import map_exposition, map_families

HANDLERS = ("/v1/completions", "/v1/chat/completions", "/health", "/metrics", "/v1/models")
SIZE_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000)
HTTP_BUCKETS = (0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


def optional_families(engines: int, model: str = "m") -> str:
    """vLLM's optional and unrelated families, sized like a real server's."""
    lines: list[str] = []

    def hist(name: str, bounds: tuple[float, ...], labels: list[str]) -> None:
        lines.append(f"# HELP {name} {name}")
        lines.append(f"# TYPE {name} histogram")
        for lab in labels:
            total = 0
            for i, b in enumerate((*bounds, float("inf"))):
                total += i
                le = "+Inf" if b == float("inf") else repr(float(b))
                lines.append(f'{name}_bucket{{{lab},le="{le}"}} {float(total)}')
            lines.append(f"{name}_count{{{lab}}} {float(total)}")
            lines.append(f"{name}_sum{{{lab}}} {float(total * 3)}")

    def counter(name: str, labels: list[str]) -> None:
        lines.append(f"# HELP {name}_total {name}")
        lines.append(f"# TYPE {name}_total counter")
        for lab in labels:
            lines.append(f"{name}_total{{{lab}}} 123.0")

    eng = [f'engine="{i}",model_name="{model}"' for i in range(engines)]
    for fam in (
        "request_prompt_tokens",
        "request_generation_tokens",
        "request_max_num_generation_tokens",
        "request_params_max_tokens",
        "request_prefill_kv_computed_tokens",
    ):
        hist(f"vllm:{fam}", SIZE_BUCKETS, eng)
    for fam in (
        "request_inference_time_seconds",
        "request_prefill_time_seconds",
        "request_decode_time_seconds",
        "request_time_per_output_token_seconds",
    ):
        hist(f"vllm:{fam}", HTTP_BUCKETS * 2, eng)
    hist("vllm:request_params_n", (1, 2, 5, 10, 20), eng)
    hist("vllm:request_num_preemptions", (1, 2, 3, 4, 5, 10, 20), eng)
    for fam in (
        "spec_decode_num_drafts",
        "spec_decode_num_draft_tokens",
        "spec_decode_num_accepted_tokens",
        "external_prefix_cache_queries",
        "external_prefix_cache_hits",
        "prompt_tokens_cached",
    ):
        counter(f"vllm:{fam}", eng)
    counter(
        "vllm:spec_decode_num_accepted_tokens_per_pos",
        [f'{e},position="{p}"' for e in eng for p in range(4)],
    )
    counter(
        "vllm:prompt_tokens_by_source",
        [
            f'{e},source="{s}"'
            for e in eng
            for s in ("local_compute", "local_cache_hit", "external_kv_transfer")
        ],
    )
    hist("vllm:kv_block_lifetime_seconds", HTTP_BUCKETS * 2, eng)
    hist("vllm:kv_block_idle_before_evict_seconds", HTTP_BUCKETS * 2, eng)
    http = [f'handler="{h}",method="{m}"' for h in HANDLERS for m in ("GET", "POST")]
    hist("http_request_duration_seconds", HTTP_BUCKETS, http)
    hist("http_request_size_bytes", SIZE_BUCKETS, http)
    hist("http_response_size_bytes", SIZE_BUCKETS, http)
    for g in range(3):
        lines.append(f'python_gc_collections_total{{generation="{g}"}} {g * 10}.0')
    return "\n".join(lines) + "\n"


def exposition(engines: int, optional: bool) -> str:
    values = [
        EngineValues(
            running=8,
            waiting=3,
            kv=0.5,
            ttft=[0.1, 0.3, 0.9] * 50,
            itl=[0.02, 0.04] * 200,
            e2e=[2.0, 5.0] * 40,
            queue_time=[0.1] * 40,
        )
        for _ in range(engines)
    ]
    text = render("dp" if engines > 1 else "v1", values)
    return text + (optional_families(engines) if optional else "")


def median_ms(fn, repeat: int) -> float:  # type: ignore[no-untyped-def]
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=200)
    args = parser.parse_args()
    vllm = ENGINES["vllm"]
    print(
        f"machine: {platform.node()} {platform.machine()} {platform.processor() or ''} "
        f"python {platform.python_version()}"
    )
    print(f"{'case':<40}{'bytes':>9}{'ours ms':>10}{'plain ms':>10}{'ratio':>8}")
    for label, engines, optional in (
        ("1 engine", 1, False),
        ("1 engine + optional families", 1, True),
        ("8 DP engines + optional families", 8, True),
    ):
        text = exposition(engines, optional)

        def ours(text: str = text) -> object:
            return map_exposition(text, vllm)

        def plain(text: str = text) -> object:
            families = {f.name: f for f in text_string_to_metric_families(text)}
            return map_families(families, vllm)

        assert ours() == plain(), "both paths must give the same result"
        ours_ms = median_ms(ours, args.repeat)
        plain_ms = median_ms(plain, args.repeat)
        print(
            f"{label:<40}{len(text):>9}{ours_ms:>10.3f}{plain_ms:>10.3f}{plain_ms / ours_ms:>7.1f}x"
        )


if __name__ == "__main__":
    main()
