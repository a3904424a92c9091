"""Shadow mode: the twin's advice held against what followed a real flag change.

Each ``inferwatch advise --shadow STATE`` run observes every worker (``--span`` of an
agent, a Prometheus range, or a trace), fits its step-time curve and keeps, per
worker, the launch flags, the fit and the load in the JSON state file. When a later
run finds a worker's ``max_num_seqs`` or ``max_num_batched_tokens`` changed, it
predicts the new setting from the fit kept *before* the change (replaying the load
observed after it, so a change of traffic is not charged to the model) and records
the prediction next to the outcome now observed. The state file keeps the last
``KEEP`` changes; ``--shadow-metrics FILE`` writes them as ``inferwatch_whatif_*``
gauges in the Prometheus text format (for node_exporter's textfile collector).
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from inferwatch.advise.model import finite
from inferwatch.advise.twin import StepFit
from inferwatch.advise.whatif import Observed, predict
from inferwatch.engines import contract
from inferwatch.errors import ConfigError
from inferwatch.pack.reading import Scrape, quantiles

VERSION = 1
KEEP = 50
#: launch flags whose change the shadow follows, and the --what-if flag each is
WATCHED = {"max_num_seqs": "max-num-seqs", "max_num_batched_tokens": "max-num-batched-tokens"}
FIGURES = ("throughput", "queue", "ttft_p50", "ttft_p95")


def load_state(path: str) -> dict[str, Any]:
    p = Path(path)
    if not p.exists():
        return {"version": VERSION, "workers": {}, "changes": []}
    try:
        doc = json.loads(p.read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(path, "file", f"the JSON state of advise --shadow ({exc})") from None
    if not isinstance(doc, dict) or doc.get("version") != VERSION:
        raise ConfigError(path, "version", f"{VERSION} (a state written by advise --shadow)")
    doc.setdefault("workers", {})
    doc.setdefault("changes", [])
    return doc


def save_state(path: str, doc: dict[str, Any]) -> None:
    p = Path(path)
    fd, tmp = tempfile.mkstemp(dir=p.parent or ".", prefix=p.name + ".")
    with os.fdopen(fd, "w") as f:
        json.dump(doc, f, indent=1, allow_nan=False)
    os.replace(tmp, p)


def outcome(obs: Observed, last: Scrape) -> dict[str, float | None]:
    """What the worker did over the observed span (TTFT where the engine reports it)."""

    ttft = quantiles(last, contract.TTFT_QUANTILE_SECONDS, worker=obs.reading.worker)
    generated = sum(i.generated for i in obs.intervals)
    return {
        "throughput": generated / obs.span if obs.span > 0 else None,
        "queue": obs.queue_mean,
        "ttft_p50": ttft.get("0.5"),
        "ttft_p95": ttft.get("0.95"),
    }


def step(
    state: dict[str, Any], obs: Observed, fit: StepFit, last: Scrape, now: float | None = None
) -> dict[str, Any] | None:
    """Update the state with one worker's observation; the change record, if flags changed."""
    now = time.time() if now is None else now
    key = obs.reading.worker
    before = state["workers"].get(key)
    flags_now = {k: obs.reading.flags.get(k) for k in WATCHED}
    if "max_num_seqs" not in obs.reading.flags:
        flags_now["max_num_seqs"] = str(obs.slots)
    record = None
    if before is not None:
        changed = [
            k for k in WATCHED if before["flags"].get(k) != flags_now.get(k) and flags_now.get(k)
        ]
        if changed:
            flag = changed[0]
            value = float(flags_now[flag] or 0)
            old_fit = StepFit(**before["fit"])
            # the old setting and fit, the load of now: only the model is judged
            old_obs = replace(
                obs,
                slots=int(float(before["flags"].get("max_num_seqs") or before["slots"])),
                batch_tokens=int(before["batch_tokens"]),
                reading=replace(
                    obs.reading,
                    kv_mean=before.get("kv_usage"),
                    running=before.get("running_mean", obs.running_mean),
                ),
            )
            pred = predict(old_obs, WATCHED[flag], value, old_fit)
            measured = outcome(obs, last)
            predicted = {k: finite(getattr(pred.new, k)) for k in FIGURES}
            errors = {
                k: (predicted[k] - measured[k]) / measured[k]
                for k in FIGURES
                if predicted[k] is not None and measured.get(k) not in (None, 0)
            }
            record = {
                "worker": key,
                "at": now,
                "flag": flag,
                "from": before["flags"].get(flag) or before.get("slots"),
                "to": flags_now[flag],
                "fitted_at": before["at"],
                "predicted": predicted,
                "measured": {k: finite(v) for k, v in measured.items()},
                "error": errors,
                "range": pred.range_note,
            }
            state["changes"] = [*state["changes"], record][-KEEP:]
    state["workers"][key] = {
        "at": now,
        "flags": flags_now,
        "slots": obs.slots,
        "batch_tokens": obs.batch_tokens,
        "kv_usage": obs.reading.kv_mean,
        "running_mean": obs.running_mean,
        "fit": asdict(fit),
    }
    return record


def render(state: dict[str, Any]) -> str:
    changes = state.get("changes") or []
    lines = ["Shadow: the twin's predictions against what followed each flag change"]
    if not changes:
        lines.append(
            "  no flag change seen yet; the fits of "
            + (", ".join(state["workers"]) or "no worker")
            + " are kept"
        )
        return "\n".join(lines) + "\n"
    for c in changes:
        when = time.strftime("%Y-%m-%d %H:%M", time.gmtime(c["at"]))
        lines.append(f"  {when} {c['worker']}: {c['flag']} {c['from']} -> {c['to']} ({c['range']})")
        for k in FIGURES:
            p, m = c["predicted"].get(k), c["measured"].get(k)
            if p is None and m is None:
                continue
            err = c["error"].get(k)
            err_text = f"{err:+.0%}" if err is not None else "-"
            lines.append(
                f"    {k:11} predicted {_num(p):>10}  measured {_num(m):>10}  error {err_text}"
            )
    return "\n".join(lines) + "\n"


def _num(v: float | None) -> str:
    return "-" if v is None else f"{v:.3g}"


def metrics_text(state: dict[str, Any]) -> str:
    """The last change per worker and flag as gauges (Prometheus text format)."""
    latest: dict[tuple[str, str], dict[str, Any]] = {}
    for c in state.get("changes") or []:
        latest[(c["worker"], c["flag"])] = c
    out = [
        "# HELP inferwatch_whatif_predicted The twin's prediction for the last flag change, from the fit before it.",
        "# TYPE inferwatch_whatif_predicted gauge",
    ]
    measured = [
        "# HELP inferwatch_whatif_measured What followed the last flag change.",
        "# TYPE inferwatch_whatif_measured gauge",
    ]
    error = [
        "# HELP inferwatch_whatif_error_ratio (predicted - measured) / measured for the last flag change.",
        "# TYPE inferwatch_whatif_error_ratio gauge",
    ]
    stamp = [
        "# HELP inferwatch_whatif_change_timestamp_seconds When the last flag change was seen.",
        "# TYPE inferwatch_whatif_change_timestamp_seconds gauge",
    ]
    for (worker, flag), c in sorted(latest.items()):
        base = (
            f'worker="{_esc(worker)}",flag="{flag}",from="{_esc(str(c["from"]))}",'
            f'to="{_esc(str(c["to"]))}"'
        )
        stamp.append(f"inferwatch_whatif_change_timestamp_seconds{{{base}}} {c['at']:.0f}")
        for k in FIGURES:
            if c["predicted"].get(k) is not None:
                out.append(
                    f'inferwatch_whatif_predicted{{{base},figure="{k}"}} {c["predicted"][k]:.6g}'
                )
            if c["measured"].get(k) is not None:
                measured.append(
                    f'inferwatch_whatif_measured{{{base},figure="{k}"}} {c["measured"][k]:.6g}'
                )
            if c["error"].get(k) is not None:
                error.append(
                    f'inferwatch_whatif_error_ratio{{{base},figure="{k}"}} {c["error"][k]:.6g}'
                )
    return "\n".join([*out, *measured, *error, *stamp]) + "\n"


def _esc(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
