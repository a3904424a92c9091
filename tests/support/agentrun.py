"""The agent as a program: ``inferwatch run`` on a loopback port, for live tests.

Every live test that needs a running agent starts it here, through ``AgentRun``
(a context manager) or the ``make_agent`` fixture of tests/conftest.py (stopped
when the test ends). The agent listens on a free loopback port (or the one
given), reads the configuration dict written next to its log, and is waited for
until it answers ``/healthz`` (or the path given); if it exits first the wait
fails with the end of its log.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from types import TracebackType
from typing import Any

import yaml
from tests.support.proc import (
    Process,
    free_port,
    http_get,
    inferwatch_cmd,
    wait_answering,
    wait_until,
)

#: the environment every test agent starts with: no configuration file from the caller's
#: shell, and asyncio's event loop as the base install runs it (``inferwatch[fast]``, which
#: the test extra installs, would pick uvloop: tests/live/test_lean_server.py runs its
#: server tests on both loops with ``LOOPS``)
QUIET_ENV = {"INFERWATCH_CONFIG": "", "INFERWATCH_UVLOOP": "0"}

#: INFERWATCH_UVLOOP per event loop the agent can run on
LOOPS = {"asyncio": "0", "uvloop": "1"}


class AgentRun:
    """``inferwatch run`` with ``args``; ``config`` is written as YAML and passed with --config.

    ``ready`` is the path polled until it answers 200 (None: do not wait, e.g. for TLS);
    ``nofile`` caps the agent's descriptors (through prlimit, which execs: the same pid).
    """

    def __init__(
        self,
        tmp: Path,
        *args: str,
        config: dict[str, Any] | None = None,
        port: int | None = None,
        nofile: int | None = None,
        name: str = "agent",
        env: dict[str, str] | None = None,
        ready: str | None = "/healthz",
        timeout: float = 60.0,
        log: Path | None = None,
    ) -> None:
        self.port = port or free_port()
        self.target = f"127.0.0.1:{self.port}"
        self.url = f"http://{self.target}"
        cmd = inferwatch_cmd("run", "--listen", self.target, *args)
        self.config_path: Path | None = None
        if config is not None:
            self.config_path = tmp / f"{name}-{self.port}.yaml"
            self.config_path.write_text(yaml.safe_dump({**config, "listen": self.target}))
            cmd += ["--config", str(self.config_path)]
        if nofile is not None:
            cmd = ["prlimit", f"--nofile={nofile}:{nofile}", *cmd]
        self.process = Process(
            cmd, log or tmp / f"{name}-{self.port}.log", env={**QUIET_ENV, **(env or {})}
        )
        if ready is not None:
            try:
                self.wait_for(ready, timeout)
            except BaseException:
                self.stop()
                raise

    def wait_for(self, path: str, timeout: float = 60.0) -> None:
        """Poll ``path`` until it answers 200; fail with the log if the agent exits first."""
        wait_answering(self.process, self.url + path, "the agent", timeout)

    def get(self, path: str, timeout: float = 5.0) -> tuple[int, bytes, dict[str, str]]:
        return http_get(self.url + path, timeout=timeout)

    def metrics(self) -> str:
        """The exposition, or "" while /metrics does not answer 200."""
        status, body, _ = self.get("/metrics")
        return body.decode() if status == 200 else ""

    def until(
        self, condition: Callable[[str], Any], timeout: float = 30.0, message: str = ""
    ) -> str:
        """The first exposition that ``condition`` holds for."""

        def text() -> str | None:
            body = self.metrics()
            return body if body and condition(body) else None

        return wait_until(text, timeout, message=message or "the agent's exposition")

    @property
    def popen(self) -> Any:
        return self.process.popen

    @property
    def args(self) -> list[str]:
        return self.process.args

    def alive(self) -> bool:
        return self.process.alive()

    def log(self) -> str:
        return self.process.log()

    def signal(self, sig: int) -> None:
        self.process.signal(sig)

    def stop(self, timeout: float = 10.0) -> int | None:
        return self.process.stop(timeout)

    def __enter__(self) -> AgentRun:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


@contextlib.contextmanager
def agents(tmp: Path) -> Iterator[Callable[..., AgentRun]]:
    """A starter of ``AgentRun``s (their arguments less ``tmp``), all stopped at the block's end."""
    started: list[AgentRun] = []

    def start(*args: str, **kwargs: Any) -> AgentRun:
        run = AgentRun(tmp, *args, **kwargs)
        started.append(run)
        return run

    try:
        yield start
    finally:
        for run in reversed(started):
            with contextlib.suppress(Exception):
                run.stop()
