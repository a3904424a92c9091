"""The demo's live table marks the guide's lines and says which memory reading the rule reads.

Issue 40: the steady demo showed VRAM 97 % on both workers next to "no condition",
and a reader had to know that the rule reads the KV cache (9 %), not NVML. The lines
come from the thresholds (a thresholds file moves them), never from the demo's code.
"""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from tests.support import scenarios as S

from inferwatch.demo.answer import answer
from inferwatch.demo.conditions import Reading
from inferwatch.demo.demo_cmd import PAST, WASTE, lifeline_cells, render, status_line
from inferwatch.pack.thresholds import load_thresholds

T = load_thresholds()


def reading(**values: object) -> Reading:
    base: dict[str, object] = {"up": True, "model": "m", "capacity": 20.0, "running": 5.0}
    return Reading(**{**base, **values})  # type: ignore[arg-type]


def test_a_pre_allocated_pool_is_not_memory_pressure_and_says_what_the_rule_reads() -> None:
    cells = lifeline_cells(reading(vram=0.97, kv=0.09, queue=0.0), T)
    assert cells["vram"].past == "" and cells["vram"].style != PAST
    assert cells["vram"].note == "reserved pool; the rule reads KV 9%"
    assert cells["kv"].past == ""
    # the KV cache past the line is the pressure the rule reads
    full = lifeline_cells(reading(vram=0.97, kv=0.95, queue=0.0), T)
    assert (full["kv"].past, full["kv"].style) == ("> 92%", PAST)
    # no KV gauge: NVML's VRAM is what the rule reads, and it is marked
    nvml = lifeline_cells(reading(vram=0.95, kv=None, queue=0.0), T)
    assert (nvml["vram"].past, nvml["vram"].style) == ("> 92%", PAST)
    assert nvml["vram"].note == "no KV gauge: the rule reads VRAM"


def test_utilization_and_the_queue_are_marked_past_their_lines() -> None:
    assert lifeline_cells(reading(gpu_util=0.2), T)["gpu"].past == "< 30%"
    assert lifeline_cells(reading(gpu_util=0.2), T)["gpu"].style == WASTE
    assert lifeline_cells(reading(gpu_util=0.9), T)["gpu"].past == "> 85%"
    assert lifeline_cells(reading(gpu_util=0.6), T)["gpu"].past == ""
    over = lifeline_cells(reading(queue=30.0, running=20.0), T)["queue"]
    assert (over.past, over.style) == ("> capacity 20", PAST)
    assert lifeline_cells(reading(queue=3.0), T)["queue"].past == ""


def test_the_lines_come_from_the_thresholds(tmp_path: Path) -> None:
    path = tmp_path / "t.yaml"
    path.write_text(
        "gpu_utilization:\n  waste_below: 0.5\nvram:\n  scale_above: 0.8\n  squeeze_above: 0.7\n"
    )
    t = load_thresholds(str(path))
    assert lifeline_cells(reading(gpu_util=0.4), t)["gpu"].past == "< 50%"
    assert lifeline_cells(reading(vram=0.97, kv=0.85), t)["kv"].past == "> 80%"
    console = Console(record=True, width=240)
    console.print(render({"w": reading(gpu_util=0.4)}, [], None, "h", None, t, []))
    text = console.export_text()
    assert "GPU util (50% | 85%)" in text and "KV (80%)" in text
    assert "memory pressure > 80%" in text


def test_the_view_shows_advises_answer_first_item_first() -> None:
    readings = S.demo_readings(S.run("overload", 1))
    recs = answer(readings, T)
    console = Console(record=True, width=240)
    console.print(render(readings, [], None, "h", None, T, recs))
    text = console.export_text()
    assert "What to do first: inferwatch advise's ranking" in text
    assert "Scale out: add a replica" in text
    line = status_line(readings, [], T, recs)
    assert f"| first: {recs[0].title} " in line and "(> capacity" in line
