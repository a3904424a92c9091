"""The host's NVIDIA GPUs as ``nvidia-smi -L`` lists them; the device tests skip without."""

from __future__ import annotations

import shutil
import subprocess


def gpu_count() -> int:
    """How many GPUs ``nvidia-smi -L`` lists (0 without nvidia-smi or when it fails)."""
    if not shutil.which("nvidia-smi"):
        return 0
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))
