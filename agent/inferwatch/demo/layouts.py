"""Which simulated workers ``inferwatch demo`` starts, where they run, and what load each gets.

The load scenarios (``steady``, ``overload``, ...) run the classic pair: two
workers on GPUs 0 and 1 sharing one load generator. The layout scenarios put
workers where users put them:

- ``tp``: one model over four GPUs (tensor parallelism, one rank process per
  GPU) and two idle spare GPUs;
- ``colocate``: two small workers on one card, each reserving 45 % of it;
- ``host8``: eight workers on an 8-GPU host, the first one overloaded;
- ``mig``: two workers on two 3g.40gb MIG slices of one H100, one overloaded
  (full), one loaded a little past what it serves (its queue rising).
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: batch capacity of every demo worker: the simulator's default
MAX_NUM_SEQS = 20


@dataclass(frozen=True)
class DemoWorker:
    name: str
    #: GPU indices it runs on (a MIG worker: its parent GPU)
    gpus: tuple[int, ...]
    #: flags for `inferwatch simulate` besides port, state dir and model
    sim_args: tuple[str, ...] = ()
    #: the MIG GPU instance it runs on, if any
    gpu_instance: int | None = None
    max_num_seqs: int = MAX_NUM_SEQS
    #: the model it serves (default ``demo-<name>``); replicas of one model share it, so
    #: the rules compare them (low utilization with normal latency)
    model: str | None = None

    @property
    def served_model(self) -> str:
        return self.model or f"demo-{self.name}"


@dataclass(frozen=True)
class LoadGroup:
    """One `inferwatch loadgen` process: a scenario against some workers."""

    scenario: str
    workers: tuple[str, ...]
    extra: tuple[str, ...] = ()


@dataclass(frozen=True)
class Layout:
    workers: tuple[DemoWorker, ...]
    gpu_count: int
    loads: tuple[LoadGroup, ...] = field(default_factory=tuple)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(w.name for w in self.workers)


LOAD_SCENARIOS = ("idle", "steady", "overload", "long-tail", "cold-start", "imbalance")
LAYOUT_SCENARIOS = ("tp", "colocate", "host8", "mig")
SCENARIOS = LOAD_SCENARIOS + LAYOUT_SCENARIOS

#: a 7B INT8 model in 45 % of a 24 GB card leaves 166 KV blocks: 2656 tokens
_COLOCATED = (
    "--gpu-index",
    "0",
    "--gpu-memory-utilization",
    "0.45",
    "--max-model-len",
    "2640",
    "--max-num-seqs",
    "8",
)
_SLICE = ("--gpu-model", "h100", "--gpu-index", "0", "--gpu-memory-utilization", "0.9")


#: the classic pair: two replicas of one model behind the load generator
PAIR_MODEL = "demo-pair"


def layout_for(scenario: str) -> Layout:
    """The layout a demo scenario runs (a load scenario: the classic pair)."""
    if scenario == "tp":
        tp = DemoWorker("worker-tp", (0, 1, 2, 3), ("--tensor-parallel", "4", "--gpu-index", "0"))
        return Layout((tp,), 6, (LoadGroup("steady", (tp.name,)),))
    if scenario == "colocate":
        a = DemoWorker("small-a", (0,), _COLOCATED, max_num_seqs=8)
        b = DemoWorker("small-b", (0,), _COLOCATED, max_num_seqs=8)
        return Layout((a, b), 1, (LoadGroup("steady", (a.name, b.name), ("--rate", "0.5")),))
    if scenario == "host8":
        workers = tuple(DemoWorker(f"worker-{i}", (i,), ("--gpu-index", str(i))) for i in range(8))
        rest = tuple(w.name for w in workers[1:])
        return Layout(
            workers,
            8,
            (
                LoadGroup("overload", (workers[0].name,)),
                LoadGroup("steady", rest, ("--rate", "10")),
            ),
        )
    if scenario == "mig":
        full = DemoWorker("slice-full", (0,), (*_SLICE, "--mig", "1:3g.40gb"), gpu_instance=1)
        rising = DemoWorker("slice-rising", (0,), (*_SLICE, "--mig", "2:3g.40gb"), gpu_instance=2)
        return Layout(
            (full, rising),
            1,
            (
                LoadGroup("overload", (full.name,)),
                LoadGroup("overload", (rising.name,), ("--rate", "3")),
            ),
        )
    if scenario not in LOAD_SCENARIOS:
        raise ValueError(f"unknown demo scenario {scenario!r}")
    pair = tuple(
        DemoWorker(name, (i,), ("--gpu-index", str(i)), model=PAIR_MODEL)
        for i, name in enumerate(("worker-a", "worker-b"))
    )
    return Layout(pair, 2, (LoadGroup(scenario, tuple(w.name for w in pair)),))
