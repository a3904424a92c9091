"""Kubernetes discovery's own cost per pass, on a full node.

    PYTHONPATH=agent:. python3 bench/bench_discovery.py [--pods 110] [--processes 4000]

One discovery pass (every ``kubernetes.interval``, 5 s) turns the node's pods
into workers (``podworkers.pod_workers``, pure), reads ``/proc/<pid>/cgroup``
of every process (``cgroups.scan``) and the stat files of the pods' processes
(``cgroups.container_roots``); ``Scanner`` and known roots are what the agent
runs after its first pass (only new processes read). Here: ``--pods`` running pods of three
containers each (one a vLLM engine: 110 is the kubelet's default pod limit)
and a /proc tree of ``--processes`` processes, half of them in those pods, in
a temporary directory (real files, read as the agent reads /proc). Median and
p90 over ``--rounds``. Asserts nothing.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from tests.support.kubeapi import make_pod

from inferwatch.agent.collectors import cgroups
from inferwatch.agent.collectors.podworkers import pod_workers


def build(root: Path, pods: int, processes: int) -> list[dict]:
    objs = []
    for i in range(pods):
        uid = f"{i:08x}-0000-4000-8000-{i:012x}"
        ids = {"vllm": f"{i:064x}", "proxy": f"{i + 10**6:064x}", "logs": f"{i + 2 * 10**6:064x}"}
        objs.append(
            make_pod(
                f"p{i}",
                uid=uid,
                ip=f"10.1.{i // 250}.{i % 250 + 1}",
                containers=[
                    {"name": "vllm", "image": "vllm/vllm-openai:v0.33.0", "args": ["--port=8000"]},
                    {
                        "name": "proxy",
                        "image": "envoyproxy/envoy:v1.31",
                        "ports": [{"containerPort": 9901}],
                    },
                    {"name": "logs", "image": "fluent/fluent-bit:3.0"},
                ],
                container_ids=ids,
            )
        )
    for pid in range(1, processes + 1):
        d = root / str(pid)
        d.mkdir()
        if pid % 2 and objs:
            pod = objs[pid % len(objs)]
            uid = pod["metadata"]["uid"].replace("-", "_")
            cid = pod["status"]["containerStatuses"][0]["containerID"].split("://")[1]
            path = f"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{uid}.slice/cri-containerd-{cid}.scope"
        else:
            path = "/system.slice/containerd.service"
        (d / "cgroup").write_text(f"0::{path}\n")
        (d / "stat").write_text(f"{pid} (python3) S {max(1, pid - 2)} {pid} {pid} 0 -1\n")
    return objs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pods", type=int, default=110)
    parser.add_argument("--processes", type=int, default=4000)
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        pods = build(root, args.pods, args.processes)
        times: dict[str, list[float]] = {
            "pods -> workers": [],
            "cgroups.scan": [],
            "Scanner.scan": [],
            "container_roots": [],
            "roots, known": [],
        }
        scanner = cgroups.Scanner(str(root))
        scanner.scan()  # the first pass reads every file; later ones only new processes
        for _ in range(args.rounds):
            t = time.perf_counter()
            workers = [w for p in pods for w in pod_workers(p)[0]]
            times["pods -> workers"].append(time.perf_counter() - t)
            t = time.perf_counter()
            found = cgroups.scan(str(root))
            times["cgroups.scan"].append(time.perf_counter() - t)
            t = time.perf_counter()
            scanner.scan()
            times["Scanner.scan"].append(time.perf_counter() - t)
            wanted = {(w.pod_uid, w.container_id) for w in workers if w.container_id}
            t = time.perf_counter()
            roots = cgroups.container_roots(found, str(root), wanted)
            times["container_roots"].append(time.perf_counter() - t)
            t = time.perf_counter()
            cgroups.container_roots(found, str(root), wanted, roots)
            times["roots, known"].append(time.perf_counter() - t)
        print(
            f"{args.pods} pods ({len(workers)} workers), {args.processes} processes ({len(found)} in pods)"
        )
        for name, values in times.items():
            values.sort()
            p90 = values[int(0.9 * (len(values) - 1))]
            print(
                f"{name:<18} median {statistics.median(values) * 1e3:7.2f} ms   p90 {p90 * 1e3:7.2f} ms"
            )


if __name__ == "__main__":
    main()
