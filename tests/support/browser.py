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
