"""Shared parsers of settings values: one grammar per kind of value, one message per mistake.

Every parser takes ``(value, source, key)``, in that order, and returns the
parsed value or raises :class:`~inferwatch.errors.ConfigError` naming the
source (a file, a flag, an environment variable), the dotted key and what was
expected. The agent's configuration (:mod:`inferwatch.agent.config`), the pack's
thresholds (:mod:`inferwatch.pack.thresholds`), the warm-up gate and the
commands' flags all use these, so ``2s`` means the same everywhere and a wrong
value reads the same wherever it is set.

Values that may be secret are shown by kind only (:class:`~inferwatch.errors.Kind`);
the parsers here never see such values (URLs and passwords have their own).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import yaml

from inferwatch.errors import ConfigError, Kind

Parser = Callable[[Any, str, str], Any]
"""``parser(value, source, key) -> parsed value``, raising ConfigError."""

# ---------------------------------------------------------------------------- durations

DURATION_EXPECTED = "a duration such as 2s, 500ms or 1m"
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_PART_RE = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)")
_PLAIN_RE = re.compile(r"\d+(?:\.\d+)?")


def duration_seconds(text: str) -> float | None:
    """Seconds of ``30m``, ``1h30m``, ``500ms``, ``2 s``, ``90`` (seconds); None when not one."""
    text = text.strip()
    if _PLAIN_RE.fullmatch(text):
        return float(text)
    pos = 0
    total = 0.0
    for m in _PART_RE.finditer(text):
        if m.start() != pos:
            return None
        total += float(m.group(1)) * _UNITS[m.group(2)]
        pos = m.end()
    if pos != len(text) or pos == 0:
        return None
    return total


def format_duration(seconds: float) -> str:
    """A PromQL / rule-file duration for ``seconds``: 1800 -> ``30m``, 37.5 -> ``37s500ms``."""
    ms = round(seconds * 1000)
    if ms == 0:
        return "0s"
    parts = []
    for unit, size in (("h", 3_600_000), ("m", 60_000), ("s", 1000), ("ms", 1)):
        n, ms = divmod(ms, size)
        if n:
            parts.append(f"{n}{unit}")
    return "".join(parts)


def duration(
    value: Any, source: str, key: str, *, zero: bool = False, whole_ms: bool = False
) -> float:
    """Seconds from a number or a duration string; greater than zero unless ``zero``.

    ``whole_ms`` refuses fractions of a millisecond (durations written into
    rule files, whose grammar has no smaller unit).
    """
    seconds = number(value)
    if seconds is None and isinstance(value, str):
        seconds = duration_seconds(value)
    if seconds is None:
        raise ConfigError(source, key, DURATION_EXPECTED, value)
    if seconds < 0 or (seconds == 0 and not zero):
        least = "of at least 0s" if zero else "greater than zero"
        raise ConfigError(source, key, f"a duration {least}", value)
    if whole_ms and abs(seconds * 1000 - round(seconds * 1000)) > 1e-6:
        raise ConfigError(source, key, "a duration in whole milliseconds", value)
    return seconds


# ---------------------------------------------------------------------------- numbers


def number(value: Any) -> float | None:
    """A finite int or float as float; None for anything else (booleans included)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    out = float(value)
    return out if math.isfinite(out) else None


def _number_where(
    value: Any, source: str, key: str, holds: Callable[[float], bool], expected: str
) -> float:
    """A number for which ``holds`` is true; else one line saying ``expected``."""
    out = number(value)
    if out is None or not holds(out):
        raise ConfigError(source, key, expected, value)
    return out


def ratio(value: Any, source: str, key: str) -> float:
    """A number between 0 and 1, both included."""
    return _number_where(value, source, key, lambda v: 0.0 <= v <= 1.0, "a ratio between 0 and 1")


def seconds(value: Any, source: str, key: str) -> float:
    """A number of seconds greater than 0 (a latency, not a window)."""
    return _number_where(value, source, key, lambda v: v > 0, "a number of seconds greater than 0")


def non_negative(value: Any, source: str, key: str) -> float:
    """A number of at least 0."""
    return _number_where(value, source, key, lambda v: v >= 0, "a number >= 0")


def above_one(value: Any, source: str, key: str) -> float:
    """A number greater than 1 (a multiplier)."""
    return _number_where(value, source, key, lambda v: v > 1, "a number greater than 1")


def count(value: Any, source: str, key: str, minimum: int = 1, maximum: int | None = None) -> int:
    """A whole number of at least ``minimum`` (and at most ``maximum``); digits in a string
    (an environment value) too."""
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())
    expected = (
        f"a whole number >= {minimum}"
        if maximum is None
        else f"a whole number from {minimum} to {maximum}"
    )
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(source, key, expected, value)
    if maximum is not None and value > maximum:
        raise ConfigError(source, key, expected, value)
    return value


# ---------------------------------------------------------------------------- other scalars


def boolean(value: Any, source: str, key: str) -> bool:
    """``true`` or ``false``: a YAML boolean, or the word in a string (an environment value)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise ConfigError(source, key, "true or false", value)


def string(value: Any, source: str, key: str) -> str:
    """A string with something in it besides white space."""
    if not isinstance(value, str) or not value.strip():
        # a wrong non-string is shown by its kind only: it may be a password typed as a number
        shown = value if isinstance(value, str) else Kind(value)
        raise ConfigError(source, key, "a non-empty string", shown)
    return value


def choice(*choices: str) -> Parser:
    """One of ``choices``, compared without case or surrounding space; returned in lower case."""

    def parse(value: Any, source: str, key: str) -> str:
        if not isinstance(value, str) or value.strip().lower() not in choices:
            raise ConfigError(source, key, "one of " + ", ".join(choices), value)
        return value.strip().lower()

    return parse


def optional(parser: Parser) -> Parser:
    """``parser``, with None (YAML ``null``) passed through."""

    def parse(value: Any, source: str, key: str) -> Any:
        return None if value is None else parser(value, source, key)

    return parse


def mapping(value: Any, source: str, key: str) -> dict[str, Any]:
    """A mapping (its values shown by kind only in the message: a section may hold secrets)."""
    if not isinstance(value, Mapping):
        raise ConfigError(source, key, "a mapping of keys to values", Kind(value))
    return dict(value)


def known_keys(raw: Mapping[Any, Any], known: Iterable[str], source: str, prefix: str) -> None:
    """Refuse a key of ``raw`` that is not in ``known`` (``prefix`` dotted before it)."""
    names = list(known)
    for key in raw:
        if key not in names:
            dotted = f"{prefix}.{key}" if prefix else str(key)
            raise ConfigError(source, dotted, "one of the known keys " + ", ".join(names))


# ---------------------------------------------------------------------------- files

#: limits of a settings file: far above any real one, far below harm
YAML_MAX_BYTES = 1 << 20
YAML_MAX_DEPTH = 32
YAML_MAX_ALIASES = 64


class _BoundedLoader(yaml.SafeLoader):
    """SafeLoader that refuses deep nesting and alias bombs while composing.

    An alias bomb (aliases of aliases of lists) is small as a node graph and
    huge once anything walks it (a 312 MB error line, a MemoryError at 2.7 GB);
    deep nesting ends in RecursionError. Both become a YAMLError here.
    """

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self._depth = 0
        self._aliases = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            self._aliases += 1
            if self._aliases > YAML_MAX_ALIASES:
                raise yaml.YAMLError(f"more than {YAML_MAX_ALIASES} aliases")
        self._depth += 1
        try:
            if self._depth > YAML_MAX_DEPTH:
                raise yaml.YAMLError(f"nested deeper than {YAML_MAX_DEPTH} levels")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def read_yaml_file(path: str) -> Mapping[str, Any]:
    """A YAML mapping from ``path`` ({} for an empty file); bad files are ConfigErrors."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read(YAML_MAX_BYTES + 1)
    except OSError as exc:
        raise ConfigError(path, "(file)", "a readable file", exc.strerror or str(exc)) from None
    if len(raw) > YAML_MAX_BYTES:
        raise ConfigError(path, "(file)", f"a file of at most {YAML_MAX_BYTES} bytes")
    try:
        decoded = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise ConfigError(path, f"line {line}", "UTF-8 text") from None
    try:
        data = yaml.load(decoded, Loader=_BoundedLoader)  # a SafeLoader subclass
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f"line {mark.line + 1}" if mark else "(file)"
        raise ConfigError(path, where, "valid YAML", str(exc.problem)[:80]) from None
    except yaml.YAMLError as exc:
        raise ConfigError(path, "(file)", "valid YAML", str(exc)[:80]) from None
    except RecursionError:
        raise ConfigError(path, "(file)", f"YAML nested at most {YAML_MAX_DEPTH} levels") from None
    if data is None:
        return {}
    if not isinstance(data, Mapping):
        raise ConfigError(path, "(top level)", "a mapping of settings", type(data).__name__)
    return data
