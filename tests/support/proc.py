"""Start real programs (Prometheus, Alertmanager, the agent, a simulator) for tests.

Every process listens on a loopback port picked here, writes its output to a
log file under the test's tmp_path, and is stopped when the test ends. Waiting
is always on a condition with a deadline, never on a bare sleep.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import pytest

T = TypeVar("T")

PROMETHEUS = shutil.which("prometheus")
PROMTOOL = shutil.which("promtool")
ALERTMANAGER = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
AMTOOL = shutil.which("amtool")

REPO = Path(__file__).resolve().parents[2]
SHARED = REPO.parent / "shared"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until(
    condition: Callable[[], T | None],
    timeout: float = 30.0,
    interval: float = 0.1,
    message: str = "condition",
) -> T:
    """Poll ``condition`` until it returns something truthy; fail the test at the deadline.

    Exceptions inside ``condition`` count as "not yet" (a server still starting),
    and the last one is shown if the deadline passes.
    """
    deadline = time.monotonic() + timeout
    last_exc: BaseException | None = None
    while True:
        try:
            result = condition()
            if result:
                return result
        except Exception as exc:
            last_exc = exc
        if time.monotonic() > deadline:
            extra = f" (last error: {last_exc!r})" if last_exc else ""
            raise AssertionError(f"timed out after {timeout}s waiting for {message}{extra}")
        time.sleep(interval)


def http_get(url: str, timeout: float = 5.0) -> tuple[int, bytes, dict[str, str]]:
    """GET a URL; returns (status, body, headers) and does not raise on HTTP errors."""
    req = urllib.request.Request(url)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read(), dict(resp.headers)
    except urllib.error.HTTPError as err:
        return err.code, err.read(), dict(err.headers)


def require_binary(path: str | None, name: str) -> str:
    if not path:
        pytest.skip(f"{name} is not installed (apt-get install prometheus prometheus-alertmanager)")
    return path


class Process:
    """A child process with its log; ``stop()`` sends SIGTERM, then SIGKILL."""

    def __init__(
        self,
        args: Sequence[str],
        log_path: Path,
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        self.args = list(args)
        self.log_path = log_path
        self._log = open(log_path, "wb")  # noqa: SIM115 - closed in stop()
        full_env = dict(os.environ)
        if env:
            full_env.update(env)
        self.popen = subprocess.Popen(
            self.args,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=full_env,
            cwd=cwd,
            start_new_session=True,
        )

    def alive(self) -> bool:
        return self.popen.poll() is None

    def log(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text(errors="replace")

    def signal(self, sig: int) -> None:
        if self.alive():
            self.popen.send_signal(sig)

    def kill(self) -> None:
        """SIGKILL, as an OOM kill does: wait for the exit, close the log."""
        self.signal(signal.SIGKILL)
        self.popen.wait(10)
        self.stop()

    def stop(self, timeout: float = 10.0) -> int | None:
        if self.alive():
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(5)
        self._log.close()
        return self.popen.returncode


def captured(
    cmd: Sequence[str],
    *,
    timeout: float,
    cwd: Path | None = None,
    stdin: str | None = None,
    env: Mapping[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """``cmd`` run to its end, its output captured as text; any exit status returns."""
    return subprocess.run(list(cmd), cwd=cwd, input=stdin, capture_output=True, text=True,
                          timeout=timeout, env=env, check=False)  # fmt: skip


def promtool(
    *args: str, cwd: Path | None = None, stdin: str | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """``promtool ARGS`` (the test skips where it is not installed); any exit status returns."""
    return captured([require_binary(PROMTOOL, "promtool"), *args], cwd=cwd, stdin=stdin,
                    timeout=timeout)  # fmt: skip


def wait_answering(process: Process, url: str, name: str, timeout: float = 60.0) -> None:
    """Poll ``url`` until it answers 200; fail with the end of the log if ``process`` exits."""

    def answers() -> bool:
        if not process.alive():
            raise AssertionError(f"{name} exited:\n{process.log()[-3000:]}")
        return http_get(url, timeout=2)[0] == 200

    wait_until(answers, timeout, interval=0.2, message=f"{name} answering {url}")


def inferwatch_cmd(*args: str) -> list[str]:
    """Command line for the installed package's CLI, run with this interpreter."""
    return [sys.executable, "-m", "inferwatch.cli", *args]


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``inferwatch ARGS`` run to its end, output captured; any exit status returns."""
    return captured(inferwatch_cmd(*args), timeout=timeout)


def loopback_home(tmp: Path, name: str) -> tuple[int, str, Path]:
    """A server's free loopback port, its URL, and its own folder ``tmp/NAME-PORT`` (made)."""
    port = free_port()
    home = tmp / f"{name}-{port}"
    home.mkdir(parents=True)
    return port, f"http://127.0.0.1:{port}", home


class PromApi:
    """The Prometheus HTTP API (``/api/v1``) of a server at ``url``: Prometheus's own, and
    VictoriaMetrics' (tests/support/vm.py), which answers the same paths."""

    url: str
    #: the server's name in a failure's message
    api_name = "prometheus"
    api_timeout = 10.0

    def api(self, path: str, **params: Any) -> Any:
        query = urllib.parse.urlencode(params)
        status, body, _ = http_get(f"{self.url}/api/v1/{path}?{query}", timeout=self.api_timeout)
        doc = json.loads(body)
        if doc.get("status") != "success":
            raise AssertionError(f"{self.api_name} API {path} {params}: {status} {doc}")
        return doc["data"]

    def query(self, promql: str, time_: float | None = None) -> list[dict[str, Any]]:
        params: dict[str, Any] = {"query": promql}
        if time_ is not None:
            params["time"] = time_
        return list(self.api("query", **params)["result"])


class Prometheus(PromApi):
    """A real Prometheus server on a loopback port with the given config and rule files."""

    def __init__(
        self, tmp: Path, config: dict[str, Any] | str, *, extra_args: Sequence[str] = ()
    ) -> None:
        binary = require_binary(PROMETHEUS, "prometheus")
        self.port, self.url, self.dir = loopback_home(tmp, "prometheus")
        cfg_path = self.dir / "prometheus.yml"
        text = config if isinstance(config, str) else json.dumps(config)
        cfg_path.write_text(text)
        self.config_path = cfg_path
        self.process = Process(
            [
                binary,
                f"--config.file={cfg_path}",
                f"--storage.tsdb.path={self.dir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--web.enable-lifecycle",
                *extra_args,
            ],
            self.dir / "prometheus.log",
        )
        wait_answering(self.process, f"{self.url}/-/ready", "prometheus")

    def scalar(self, promql: str) -> float | None:
        """The value of a query that returns one series (None when empty)."""
        result = self.query(promql)
        if not result:
            return None
        if len(result) > 1:
            raise AssertionError(f"{promql} returned {len(result)} series: {result}")
        return float(result[0]["value"][1])

    def targets_up(self) -> bool:
        data = self.api("targets")
        active = data["activeTargets"]
        return bool(active) and all(t["health"] == "up" for t in active)

    def reload(self) -> None:
        req = urllib.request.Request(f"{self.url}/-/reload", method="POST")
        urllib.request.urlopen(req, timeout=10).close()

    def stop(self) -> None:
        self.process.stop()


class Alertmanager:
    """A real Alertmanager on loopback ports with the given configuration text."""

    def __init__(self, tmp: Path, config_text: str) -> None:
        binary = require_binary(ALERTMANAGER, "prometheus-alertmanager")
        self.port, self.url, self.dir = loopback_home(tmp, "alertmanager")
        cluster_port = free_port()
        cfg = self.dir / "alertmanager.yml"
        cfg.write_text(config_text)
        self.process = Process(
            [
                binary,
                f"--config.file={cfg}",
                f"--storage.path={self.dir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                f"--cluster.listen-address=127.0.0.1:{cluster_port}",
            ],
            self.dir / "alertmanager.log",
        )
        wait_answering(self.process, f"{self.url}/-/ready", "alertmanager")

    def post(self, alerts: list[dict[str, Any]]) -> None:
        """POST alerts (each ``{"labels": {...}, ...}``) to /api/v2/alerts, as Prometheus does."""
        request = urllib.request.Request(
            f"{self.url}/api/v2/alerts",
            data=json.dumps(alerts).encode(),
            method="POST",
            headers={"Content-Type": "application/json"},
        )
        urllib.request.urlopen(request, timeout=10).close()

    def alerts(self) -> list[dict[str, Any]]:
        """Every alert Alertmanager holds, with its status."""
        with urllib.request.urlopen(f"{self.url}/api/v2/alerts", timeout=10) as resp:
            return list(json.load(resp))

    def stop(self) -> None:
        self.process.stop()


@contextlib.contextmanager
def running(*processes: Any) -> Iterator[None]:
    """Stop every process (anything with ``stop()``) when the block ends."""
    try:
        yield
    finally:
        for p in reversed(processes):
            with contextlib.suppress(Exception):
                p.stop()
