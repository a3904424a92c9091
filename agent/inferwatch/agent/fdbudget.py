"""How the agent shares its file descriptors between serving and scraping.

With a low limit (``ulimit -n 64``) and many workers, scrapes used to take
every descriptor and ``/metrics`` stopped answering. Half the limit goes to
served connections, a quarter to scrapes in flight; the rest is for NVML,
``/proc``, the log and Python itself.
"""

from __future__ import annotations


def descriptor_limit() -> int | None:
    """The process's soft limit on open files, or None where it cannot be read."""
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    except (ImportError, OSError, ValueError):
        return None
    return None if soft == resource.RLIM_INFINITY else int(soft)


def inbound_budget(configured: int, limit: int | None) -> int:
    """Connections to serve at once: the setting, or half the descriptors when fewer
    (the other half: scrapes of workers, NVML, /proc, the log, Python itself)."""
    if limit is None:
        return configured
    return max(4, min(configured, limit // 2 - 8))


def outbound_budget(limit: int | None) -> int:
    """Worker scrapes in flight at once: a quarter of the descriptors, 32 at most."""
    if limit is None:
        return 32
    return max(2, min(32, limit // 4))
