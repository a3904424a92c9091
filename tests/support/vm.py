"""Real VictoriaMetrics programs (Debian's ``victoria-metrics`` 1.79) for tests and benchmarks.

``VictoriaMetrics`` (the single-node store), ``VMAlert`` (rules against it)
and ``VMAuth`` (an authenticating proxy in front of it), each on a loopback
port picked here, with its data and log under the test's directory, stopped
by pid (:class:`tests.support.proc.Process`). The Debian service is not used.
"""

from __future__ import annotations

import json
import shutil
import urllib.parse
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.support.proc import Process, PromApi, http_get, loopback_home, wait_answering

VICTORIA_METRICS = shutil.which("victoria-metrics")
VMALERT = shutil.which("vmalert")
VMAUTH = shutil.which("vmauth")


def require_vm(path: str | None, name: str) -> str:
    if not path:
        pytest.skip(f"{name} is not installed (apt-get install victoria-metrics)")
    return path


class _Server:
    name = ""
    process: Process
    url: str

    def _wait_ready(self) -> None:
        # vmauth answers its own /health without a user too; anything else needs one
        wait_answering(self.process, f"{self.url}/health", self.name)

    def stop(self) -> None:
        self.process.stop()


class VictoriaMetrics(_Server, PromApi):
    """The single-node store; Prometheus remote-writes to ``write_url``.

    ``-search.latencyOffset=0s``: by default the store hides the last 30 s of
    samples from queries (they may still be arriving); a test that waits on
    fresh data would wait 30 s longer for nothing.
    """

    name = "victoria-metrics"
    api_name = "victoria-metrics"
    api_timeout = 20.0

    def __init__(self, tmp: Path, retention: str = "1d", extra_args: Sequence[str] = ()) -> None:
        binary = require_vm(VICTORIA_METRICS, "victoria-metrics")
        self.port, self.url, self.dir = loopback_home(tmp, "victoria-metrics")
        self.write_url = f"{self.url}/api/v1/write"
        self.process = Process(
            [
                binary,
                f"-storageDataPath={self.dir / 'data'}",
                f"-httpListenAddr=127.0.0.1:{self.port}",
                f"-retentionPeriod={retention}",
                "-search.latencyOffset=0s",
                *extra_args,
            ],
            self.dir / "victoria-metrics.log",
        )
        self._wait_ready()

    def import_prometheus(self, lines: Sequence[str]) -> None:
        """Samples in the text format with millisecond timestamps (``/api/v1/import/prometheus``),
        then a flush so that the next query sees them."""
        for start in range(0, len(lines), 50_000):
            body = ("\n".join(lines[start : start + 50_000]) + "\n").encode()
            request = urllib.request.Request(
                f"{self.url}/api/v1/import/prometheus", data=body, method="POST"
            )
            with urllib.request.urlopen(request, timeout=120) as response:
                if response.status != 204:
                    raise AssertionError(f"import: HTTP {response.status}")
        with urllib.request.urlopen(f"{self.url}/internal/force_flush", timeout=60):
            pass


class VMAlert(_Server):
    """vmalert over a datasource URL, writing recorded series and alert state back.

    ``external_labels`` are added to every recorded series and alert;
    ``datasource_url`` may carry query arguments (``?extra_label=cluster=a``),
    which vmalert keeps on every query it sends.
    """

    name = "vmalert"

    def __init__(
        self,
        tmp: Path,
        *,
        datasource_url: str,
        remote_write_url: str,
        rule_files: Sequence[Path],
        notifier_url: str,
        evaluation_interval: str = "2s",
        external_labels: dict[str, str] | None = None,
        extra_args: Sequence[str] = (),
    ) -> None:
        binary = require_vm(VMALERT, "vmalert")
        self.port, self.url, self.dir = loopback_home(tmp, "vmalert")
        args = [
            binary,
            f"-datasource.url={datasource_url}",
            f"-remoteWrite.url={remote_write_url}",
            f"-httpListenAddr=127.0.0.1:{self.port}",
            f"-evaluationInterval={evaluation_interval}",
            "-remoteWrite.flushInterval=1s",
            f"-notifier.url={notifier_url}",
            *[f"-rule={p}" for p in rule_files],
            *[f"-external.label={k}={v}" for k, v in (external_labels or {}).items()],
            *extra_args,
        ]
        self.process = Process(args, self.dir / "vmalert.log")
        self._wait_ready()

    def groups(self) -> list[dict[str, Any]]:
        status, body, _ = http_get(f"{self.url}/api/v1/rules", timeout=10)
        if status != 200:
            raise AssertionError(f"vmalert /api/v1/rules: HTTP {status}")
        return list(json.loads(body)["data"]["groups"])

    def rules(self) -> list[dict[str, Any]]:
        return [rule for group in self.groups() for rule in group["rules"]]

    def alerts(self) -> list[dict[str, Any]]:
        status, body, _ = http_get(f"{self.url}/api/v1/alerts", timeout=10)
        if status != 200:
            raise AssertionError(f"vmalert /api/v1/alerts: HTTP {status}")
        return list(json.loads(body)["data"]["alerts"])


class VMAuth(_Server):
    """vmauth in front of a backend: bearer-token and basic-auth users, each with a URL prefix.

    ``users`` are vmauth's own ``users:`` entries (``bearer_token`` or
    ``username``/``password``, and ``url_prefix``).
    """

    name = "vmauth"

    def __init__(self, tmp: Path, users: list[dict[str, Any]]) -> None:
        binary = require_vm(VMAUTH, "vmauth")
        self.port, self.url, self.dir = loopback_home(tmp, "vmauth")
        config = self.dir / "auth.yml"
        config.write_text(yaml.safe_dump({"users": users}, sort_keys=False))
        self.process = Process(
            [binary, f"-auth.config={config}", f"-httpListenAddr=127.0.0.1:{self.port}"],
            self.dir / "vmauth.log",
        )
        self._wait_ready()
