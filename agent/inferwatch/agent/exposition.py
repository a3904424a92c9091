"""The agent's exposition: the sources' families as text-format bytes, cached, gzipped on demand.

The bytes are the text ``generate_latest()`` would write for the same families,
rendered in parts: a source whose ``families()`` returns the very list it
returned last time (NVML between its passes, the engine between its scrapes)
keeps its text, so a GPU pass does not re-render every worker's histograms
(docs/performance.md). The HTTP server (:mod:`inferwatch.agent.exporter`) serves
:attr:`Exposition.body` and :meth:`Exposition.gzipped`; the agent's wiring
(:mod:`inferwatch.agent.wiring`) calls :meth:`Exposition.rebuild_async` after every
refresh. Nothing here knows about timers, workers or HTTP.
"""

from __future__ import annotations

import asyncio
import gzip
import logging
import re
import time
from collections.abc import Callable, Iterable, Iterator, Sequence

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.gc_collector import GCCollector
from prometheus_client.metrics_core import Metric
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.utils import floatToGoString

from inferwatch.agent.collectors.base import Source

log = logging.getLogger("inferwatch")

#: gzip level of /metrics: most of level 9's ratio for a fraction of its time
GZIP_LEVEL = 5


def families_of(source: Source) -> list[Metric]:
    """The source's families as a list: the very list when families() returns one.

    A source whose families() raises is counted (``internal``) and contributes
    nothing; it never empties the rest of the exposition.
    """
    got: list[Metric] = []
    try:
        families = source.families()
        if isinstance(families, list):
            return families
        for family in families:
            got.append(family)
    except Exception:  # a bug in one source must not empty the whole exposition
        source.health.error("internal", "building metric families failed")
        log.exception("source %s: families() failed", source.name)
    return got


class _Bridge:
    """A prometheus_client collector yielding what the exposition holds (its registry view)."""

    def __init__(self, exposition: Exposition) -> None:
        self.exposition = exposition

    def collect(self) -> Iterable[Metric]:
        yield from self.exposition.own_families()
        for source in self.exposition.sources():
            yield from families_of(source)


class _Listed:
    """Families already built, in the shape generate_latest() reads (a registry)."""

    def __init__(self, families: Iterable[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterable[Metric]:
        return self.families


#: A rebuild hands the event loop back to scrapes after about this much work (seconds).
_REBUILD_SLICE = 0.002

_LEGACY_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LEGACY_LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
#: metric and label names seen to need no escaping (the agent's own: a small, fixed set)
_PLAIN_NAMES: set[str] = set()
_PLAIN_LABELS: set[str] = set()


def _plain(name: str, known: set[str], pattern: re.Pattern[str]) -> bool:
    if name in known:
        return True
    if not pattern.fullmatch(name):
        return False
    if len(known) < 10_000:
        known.add(name)
    return True


def family_text(family: Metric) -> str:
    """One family in the text format, the bytes generate_latest() writes for it.

    generate_latest() validates and escapes every label name of every sample, which
    made it most of a rebuild's cost. Families of the common shape (names that need
    no escaping, no timestamps, no OpenMetrics-only samples) are written here; any
    other family is handed to generate_latest() itself.
    """
    name, kind = family.name, family.type
    if kind == "counter":
        name += "_total"
    elif kind not in ("gauge", "histogram", "summary", "untyped"):
        return _generated(family)
    if not _plain(name, _PLAIN_NAMES, _LEGACY_NAME):
        return _generated(family)
    doc = family.documentation.replace("\\", r"\\").replace("\n", r"\n")
    lines = [f"# HELP {name} {doc}\n# TYPE {name} {kind}\n"]
    special = (family.name + "_created", family.name + "_gsum", family.name + "_gcount")
    for sample in family.samples:
        sname, labels = sample.name, sample.labels
        if (
            sample.timestamp is not None
            or sname in special
            or not _plain(sname, _PLAIN_NAMES, _LEGACY_NAME)
        ):
            return _generated(family)
        if labels:
            pairs = []
            for key in sorted(labels):
                if not _plain(key, _PLAIN_LABELS, _LEGACY_LABEL):
                    return _generated(family)
                value = labels[key]
                if "\\" in value or "\n" in value or '"' in value:
                    value = value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")
                pairs.append(f'{key}="{value}"')
            lines.append(f"{sname}{{{','.join(pairs)}}} {floatToGoString(sample.value)}\n")
        else:
            lines.append(f"{sname} {floatToGoString(sample.value)}\n")
    return "".join(lines)


def _generated(family: Metric) -> str:
    return generate_latest(_Listed((family,))).decode("utf-8")


def render(families: Iterable[Metric]) -> bytes:
    return "".join(family_text(family) for family in families).encode("utf-8")


class Exposition:
    """The last built exposition of ``sources()``, after ``own_families()`` (the agent's).

    ``registry`` holds the same families for ``generate_latest()`` (the reference
    the rendering is tested against), followed by the Python runtime's own
    collectors (process, platform, GC).
    """

    def __init__(
        self,
        own_families: Callable[[], Iterable[Metric]],
        sources: Callable[[], Sequence[Source]],
    ) -> None:
        self.own_families = own_families
        self.sources = sources
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_Bridge(self))
        self._runtime = CollectorRegistry(auto_describe=False)
        for collector in (
            ProcessCollector(registry=self._runtime),
            PlatformCollector(registry=self._runtime),
            GCCollector(registry=self._runtime),
        ):
            self.registry.register(collector)
        #: the text-format bytes served on /metrics
        self.body: bytes = b""
        self._gzip_cache: tuple[bytes, bytes] | None = None
        self._gzip_pending: tuple[bytes, asyncio.Future[bytes]] | None = None
        #: source name -> (the family list it returned, that list rendered as text)
        self._parts: dict[str, tuple[list[Metric], bytes]] = {}
        self._rebuilding = asyncio.Lock()

    def forget(self, source_name: str) -> None:
        """Render ``source_name`` anew at the next build (a source replaced or reconfigured)."""
        self._parts.pop(source_name, None)

    def _build(self) -> Iterator[None]:
        """Render the exposition, yielding wherever a caller may hand the loop back.

        A source whose families() returns the very list it returned last time keeps
        its rendered text; after about _REBUILD_SLICE of work the generator yields.
        """
        mark = time.perf_counter()
        parts = [render(self.own_families())]
        for source in self.sources():
            families = families_of(source)
            if time.perf_counter() - mark > _REBUILD_SLICE:
                yield
                mark = time.perf_counter()
            cached = self._parts.get(source.name)
            if cached is None or cached[0] is not families:
                text: list[str] = []
                for family in families:
                    text.append(family_text(family))
                    if time.perf_counter() - mark > _REBUILD_SLICE:
                        yield
                        mark = time.perf_counter()
                cached = (families, "".join(text).encode("utf-8"))
                self._parts[source.name] = cached
            parts.append(cached[1])
        parts.append(generate_latest(self._runtime))
        self.body = b"".join(parts)
        self._gzip_cache = None

    def rebuild(self) -> None:
        """Render the exposition in one go (start-up, tools, tests)."""
        for _ in self._build():
            pass

    async def rebuild_async(self) -> None:
        """As rebuild(), yielding to the event loop between slices of rendering.

        A scrape that arrives while many workers' families are rendered waits for one
        slice (about _REBUILD_SLICE), not for the whole rebuild.
        """
        async with self._rebuilding:
            await asyncio.sleep(0)  # the refresh's last step and the rebuild: two turns
            for _ in self._build():
                await asyncio.sleep(0)

    def gzipped_ready(self) -> bytes | None:
        """The gzip-compressed body when this build's is compressed already, else None:
        the common case of a scrape, answered without a turn of the event loop."""
        cache = self._gzip_cache
        if cache is not None and cache[0] is self.body:
            return cache[1]
        return None

    async def gzipped(self) -> bytes:
        """The body gzip-compressed, once per build. The compression runs in a thread
        (zlib lets go of the GIL), so scrapes of the plain text and other work go on
        meanwhile; concurrent callers share one job."""
        body = self.body
        cache = self._gzip_cache
        if cache is not None and cache[0] is body:
            return cache[1]
        pending = self._gzip_pending
        if pending is None or pending[0] is not body:
            job = asyncio.to_thread(gzip.compress, body, compresslevel=GZIP_LEVEL)
            pending = (body, asyncio.ensure_future(job))
            self._gzip_pending = pending
        try:
            zipped = await asyncio.shield(pending[1])
        finally:
            if self._gzip_pending is pending and pending[1].done():
                self._gzip_pending = None
        if self.body is body:
            self._gzip_cache = (body, zipped)
        return zipped
