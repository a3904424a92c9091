"""Headless Chromium (Debian's package) for the reports' HTML: the DOM after scripts, a picture.

The flags keep it off the network and out of the caller's profile; the virtual
time budget lets the page's scripts and images finish before the dump.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

CHROMIUM = shutil.which("chromium")


class Headless:
    """Chromium runs with one throwaway profile under ``profile``."""

    def __init__(self, profile: Path, budget_ms: int = 10000) -> None:
        chromium = CHROMIUM or pytest.skip("chromium is not installed (apt-get install chromium)")
        self.base = [
            chromium,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={profile}",
            "--hide-scrollbars",
            f"--virtual-time-budget={budget_ms}",
        ]

    def dom(self, page: Path) -> subprocess.CompletedProcess[str]:
        """The page's DOM after its load handlers ran (``--dump-dom``)."""
        return subprocess.run(
            [*self.base, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120
        )

    def screenshot(self, page: Path, shot: Path, size: str) -> None:
        """A PNG of the page at ``size`` ("width,height") written to ``shot``."""
        shot.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [*self.base, f"--window-size={size}", f"--screenshot={shot}", page.as_uri()],
            capture_output=True,
            timeout=120,
        )


class Devtools:
    """Headless Chromium driven over the DevTools protocol on a pipe
    (``--remote-debugging-pipe``: no port): open a URL in a window of ``size``, run
    script in the page, take a picture. One page at a time; ``close()`` ends Chromium."""

    def __init__(self, profile: Path, size: tuple[int, int] = (1280, 800)) -> None:
        import os

        chromium = CHROMIUM or pytest.skip("chromium is not installed (apt-get install chromium)")
        to_chrome, self._to_chrome = os.pipe()
        self._from_chrome, from_us = os.pipe()

        def pipes() -> None:  # Chromium reads commands on fd 3 and answers on fd 4
            a, b = os.dup(to_chrome), os.dup(from_us)
            os.dup2(a, 3)
            os.dup2(b, 4)

        self.proc = subprocess.Popen(
            [
                chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                "--no-first-run", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--hide-scrollbars",
                f"--user-data-dir={profile}", f"--window-size={size[0]},{size[1]}",
                "--remote-debugging-pipe", "about:blank",
            ],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            pass_fds=(3, 4), preexec_fn=pipes,
        )  # fmt: skip
        os.close(to_chrome)
        os.close(from_us)
        self.size = size
        self._buf = b""
        self._id = 0
        self.events: list[dict] = []
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        attached = self.call("Target.attachToTarget", targetId=target, flatten=True)
        self.session = attached["sessionId"]
        self.call("Page.enable", session=True)
        self.call("Runtime.enable", session=True)
        self.call("Log.enable", session=True)  # CSP refusals arrive as log entries
        self.call(
            "Emulation.setDeviceMetricsOverride",
            session=True, width=size[0], height=size[1], deviceScaleFactor=1, mobile=False,
        )  # fmt: skip

    def _read(self) -> dict:
        import json
        import os

        while b"\0" not in self._buf:
            chunk = os.read(self._from_chrome, 1 << 16)
            if not chunk:
                raise RuntimeError("chromium closed its DevTools pipe")
            self._buf += chunk
        message, self._buf = self._buf.split(b"\0", 1)
        return dict(json.loads(message))

    def call(self, method: str, session: bool = False, **params: object) -> dict:
        """Send one command and wait for its answer (events meanwhile go to ``events``)."""
        import json
        import os

        self._id += 1
        message: dict = {"id": self._id, "method": method, "params": params}
        if session:
            message["sessionId"] = self.session
        os.write(self._to_chrome, json.dumps(message).encode() + b"\0")
        while True:
            reply = self._read()
            if reply.get("id") == self._id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return dict(reply.get("result", {}))
            self.events.append(reply)

    def open(self, url: str, timeout: float = 30) -> None:
        """Navigate to ``url`` and wait for its load event (its scripts have run)."""
        import time

        self.events.clear()
        self.call("Page.navigate", session=True, url=url)
        deadline = time.monotonic() + timeout
        while not any(e.get("method") == "Page.loadEventFired" for e in self.events):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{url} did not load in {timeout}s")
            self.events.append(self._read())

    def eval(self, expression: str) -> object:
        """The value of a JavaScript expression in the page (JSON-able)."""
        result = self.call(
            "Runtime.evaluate", session=True, expression=expression, returnByValue=True
        )
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def console_errors(self) -> list[dict]:
        """Exceptions thrown, console errors and CSP refusals since the page was opened."""
        self.call("Runtime.evaluate", session=True, expression="0")  # collect pending events
        return [
            e
            for e in self.events
            if e.get("method") == "Runtime.exceptionThrown"
            or (
                e.get("method") == "Runtime.consoleAPICalled"
                and e.get("params", {}).get("type") == "error"
            )
            or (
                e.get("method") == "Log.entryAdded"
                and e.get("params", {}).get("entry", {}).get("level") == "error"
            )
        ]

    def screenshot(self, shot: Path) -> None:
        """A PNG of what the window shows now (the first screen)."""
        import base64

        shot.parent.mkdir(parents=True, exist_ok=True)
        data = self.call("Page.captureScreenshot", session=True, format="png")["data"]
        shot.write_bytes(base64.b64decode(data))

    def close(self) -> None:
        import contextlib
        import os

        with contextlib.suppress(RuntimeError, OSError):
            self.call("Browser.close")
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._to_chrome)
        os.close(self._from_chrome)
