"""A known GPU load for the H200 validation: hold N GiB and run bf16 matmuls on demand.

    python3 bench/device/gpu_load.py --gib 16 --control FILE --ready FILE

The control file says ``run`` (matmuls back to back), ``pause`` (memory held, no
kernels) or ``stop``. Once the memory is held, the ready file receives a JSON line
with the pid and PyTorch's own count of the bytes it holds.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import time
from pathlib import Path

GIB = 1024**3


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--gib", type=float, default=16.0)
    parser.add_argument("--size", type=int, default=8192, help="matmul side")
    parser.add_argument("--control", type=Path, required=True)
    parser.add_argument("--ready", type=Path, required=True)
    args = parser.parse_args()

    import torch

    held = torch.empty(int(args.gib * GIB), dtype=torch.uint8, device="cuda")
    held.fill_(1)  # touch it, so the memory is really committed
    a = torch.randn(args.size, args.size, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(args.size, args.size, dtype=torch.bfloat16, device="cuda")
    c = a @ b
    torch.cuda.synchronize()
    args.ready.write_text(
        json.dumps(
            {
                "pid": os.getpid(),
                "held_bytes": held.numel(),
                "torch_allocated_bytes": torch.cuda.memory_allocated(),
                "torch_reserved_bytes": torch.cuda.memory_reserved(),
                "torch": torch.__version__,
                "device": torch.cuda.get_device_name(0),
            }
        )
    )
    state, checked = "run", 0.0
    while True:
        now = time.monotonic()
        if now - checked > 0.1:
            with contextlib.suppress(FileNotFoundError):
                state = args.control.read_text().strip() or state
            checked = now
        if state == "stop":
            break
        if state == "run":
            for _ in range(10):
                torch.matmul(a, b, out=c)
            torch.cuda.synchronize()
        else:
            time.sleep(0.05)
    del held, a, b, c
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
