"""A real Prometheus on prepared TSDB blocks: OpenMetrics text -> promtool -> Prometheus.

``create_blocks`` runs ``promtool tsdb create-blocks-from openmetrics`` into a
data directory; ``PromOnBlocks`` opens a copy of that directory (``Prometheus``
in proc.py creates its own empty one) with a retention long enough for old
timestamps, and ``loaded`` waits until a query over the blocks answers. Used by
the report, SLO, what-if and loop tests.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.parse
from pathlib import Path
from typing import Any

from tests.support.proc import (
    PROMETHEUS,
    PROMTOOL,
    Process,
    free_port,
    http_get,
    require_binary,
    wait_answering,
    wait_until,
)


def create_blocks(openmetrics: Path, data: Path, timeout: float = 300) -> Path:
    """``promtool tsdb create-blocks-from openmetrics`` of one file into ``data``."""
    promtool = require_binary(PROMTOOL, "promtool")
    data.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [promtool, "tsdb", "create-blocks-from", "openmetrics", "-q", str(openmetrics), str(data)],
        check=True,
        capture_output=True,
        timeout=timeout,
    )
    return data


class PromOnBlocks:
    """A real Prometheus opening a copy of prepared TSDB blocks."""

    def __init__(self, tmp: Path, blocks: Path, *extra: str) -> None:
        binary = require_binary(PROMETHEUS, "prometheus")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.dir = tmp / f"prometheus-{self.port}"
        data = self.dir / "data"
        shutil.copytree(blocks, data)
        (self.dir / "prometheus.yml").write_text("global: {}\n")
        self.process = Process(
            [
                binary,
                f"--config.file={self.dir / 'prometheus.yml'}",
                f"--storage.tsdb.path={data}",
                "--storage.tsdb.retention.time=100y",
                f"--web.listen-address=127.0.0.1:{self.port}",
                *extra,
            ],
            self.dir / "prometheus.log",
        )
        wait_answering(self.process, f"{self.url}/-/ready", "prometheus", timeout=90)

    def query(self, promql: str, at: float) -> list[dict[str, Any]]:
        """The instant query's result at ``at`` (empty while the blocks are not open yet)."""
        params = urllib.parse.urlencode({"query": promql, "time": at})
        status, body, _ = http_get(f"{self.url}/api/v1/query?{params}")
        return list(json.loads(body)["data"]["result"]) if status == 200 else []

    def loaded(self, promql: str, at: float, timeout: float = 60) -> PromOnBlocks:
        """Wait until ``promql`` at ``at`` answers something: the blocks are readable."""
        wait_until(lambda: self.query(promql, at), timeout=timeout, message="blocks loaded")
        return self

    def collect(self, end: float, days: int, t: Any) -> Any:
        """What ``inferwatch report`` reads of these blocks: the ``days`` ending at ``end``."""
        from inferwatch.report.model import Period
        from inferwatch.report.promapi import PrometheusClient
        from inferwatch.report.query import collect

        return collect(PrometheusClient(self.url), Period(end, days), t)

    def stop(self) -> None:
        self.process.stop()
