"""Credentials out of anything the agent shows: log lines, its / page, error messages."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit


def redact_url(url: str) -> str:
    """``url`` with any ``user:password@`` replaced by ``***@`` (the rest unchanged)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "(unparsable URL)"
    if "@" not in parts.netloc:
        return url
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, "***@" + host, parts.path, parts.query, parts.fragment))
