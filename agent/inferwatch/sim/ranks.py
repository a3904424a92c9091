"""One child process per tensor-parallel rank, as vLLM V1 runs its GPU workers.

vLLM's multiprocess executor starts a worker process per rank under the
engine process, and it is those processes that NVML lists on each GPU. The
simulator does the same with idle stand-ins, so that an agent attributing
GPU processes to workers through the process tree meets the real shape: the
worker's listening process is not on any GPU, its children are.

A rank process must never outlive the simulator. Three things see to it:
the parent terminates them when it stops; each child asks the kernel for
SIGKILL when its parent dies (``prctl(PR_SET_PDEATHSIG)``); and each child
blocks reading a pipe from the parent and exits at end-of-file, which the
kernel delivers when the parent dies however it died.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Sequence

#: What a rank process runs: name itself, die with the parent, wait for the pipe to close.
_CHILD = """
import ctypes, os, signal, sys
try:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(15, sys.argv[1].encode()[:15], 0, 0, 0)  # PR_SET_NAME: psutil's name()
    libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
except (OSError, AttributeError):
    pass
if os.getppid() != int(sys.argv[2]):
    sys.exit(0)  # the parent died before the death signal was armed
signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
sys.stdout.buffer.write(b"r")  # ready: named and bound to the parent
sys.stdout.buffer.close()
while sys.stdin.buffer.read(4096):
    pass
"""
#: seconds a rank gets to exit after its pipe closed, before it is killed
STOP_TIMEOUT = 5.0


def rank_name(rank: int) -> str:
    """The process name of rank ``rank`` (vLLM V1 calls its workers ``VllmWorker-N``)."""
    return f"VllmWorker-{rank}"


class RankProcesses:
    """``count`` rank processes, children of this one; :meth:`stop` ends them."""

    def __init__(self, count: int) -> None:
        self.count = count
        self._procs: list[subprocess.Popen[bytes]] = []

    @property
    def pids(self) -> Sequence[int]:
        return [p.pid for p in self._procs]

    def start(self) -> None:
        parent = str(os.getpid())
        try:
            for rank in range(self.count):
                self._procs.append(
                    subprocess.Popen(
                        [sys.executable, "-c", _CHILD, rank_name(rank), parent],
                        stdin=subprocess.PIPE,
                        stdout=subprocess.PIPE,
                        stderr=subprocess.DEVNULL,
                        close_fds=True,
                    )
                )
            # As vLLM waits for its workers, return once every rank is ready.
            for proc in self._procs:
                assert proc.stdout is not None
                ready = proc.stdout.read(1)
                proc.stdout.close()
                if ready != b"r":
                    raise OSError(f"rank process {proc.pid} exited at start ({proc.poll()})")
        except OSError:
            self.stop()
            raise

    def stop(self) -> None:
        for proc in self._procs:
            if proc.stdin is not None:
                with contextlib.suppress(OSError):
                    proc.stdin.close()  # end-of-file: the rank exits by itself
        for proc in self._procs:
            try:
                proc.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self._procs.clear()
