"""Writing a trace (format: the package): all at once, or record by record as a run goes.

The header is checked as the reader checks it (:func:`~.read.check_header`) before
the file is complete, so a recorder cannot leave a trace the readers refuse.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import IO, Any

from inferwatch.errors import ConfigError
from inferwatch.traces.read import RECORD_KINDS, check_header, header_of


def _header_line(header: Mapping[str, Any]) -> str:
    return json.dumps(header_of(header)) + "\n"


def _record_line(t: float, kind: str, value: Any) -> str:
    kind_type = RECORD_KINDS.get(kind)
    if kind_type is None or not isinstance(value, kind_type):
        expected = ", ".join(f"{k} ({v.__name__})" for k, v in RECORD_KINDS.items())
        raise ConfigError("trace record", kind, f"one of {expected}", type(value).__name__)
    return json.dumps({"t": round(t, 4), kind: value}) + "\n"


def write_header(out: IO[str], header: Mapping[str, Any]) -> None:
    """Line 1: ``header`` (scrape_interval_s, source, phases, workers, ...) with kind and
    version."""
    out.write(_header_line(header))


def write_record(out: IO[str], t: float, kind: str, value: Any) -> None:
    """One ``{"t": t, kind: value}`` line (``kind``: one of :data:`RECORD_KINDS`)."""
    out.write(_record_line(t, kind, value))


def write_trace(
    path: Path, header: Mapping[str, Any], records: Iterable[tuple[float, str, Any]]
) -> Path:
    """A whole trace: the header, then ``records`` ((t, kind, value)) in time order."""
    check_header(header_of(header), str(path))
    # every record checked before the file is opened: a bad one leaves no half trace
    lines = [_record_line(t, kind, value) for t, kind, value in sorted(records, key=lambda r: r[0])]
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt", encoding="utf-8") as out:
        out.write(_header_line(header))
        out.writelines(lines)
    return path


class TraceWriter:
    """A trace written as the run goes; the header is written again by :meth:`close`,
    when the phases' times are known."""

    def __init__(self, path: Path, header: Mapping[str, Any]) -> None:
        self.path = path
        self.header = dict(header)
        self._out = gzip.open(path, "wt", encoding="utf-8")  # noqa: SIM115 (closed by close())
        write_header(self._out, self.header)

    def record(self, t: float, kind: str, value: Any) -> None:
        write_record(self._out, t, kind, value)

    def close(self, phases: list[dict[str, Any]] | None = None) -> Path:
        """Close the file; with ``phases``, the header line is rewritten to carry them."""
        self._out.close()
        if phases is None:
            check_header(header_of(self.header), str(self.path))
            return self.path
        self.header["phases"] = phases
        check_header(header_of(self.header), str(self.path))
        with gzip.open(self.path, "rt", encoding="utf-8") as fh:
            lines = fh.read().splitlines(keepends=True)
        with gzip.open(self.path, "wt", encoding="utf-8") as fh:
            fh.write(_header_line(self.header))
            fh.writelines(lines[1:])
        return self.path
