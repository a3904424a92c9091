"""Errors that end a command with one clear line and exit code 2."""

from __future__ import annotations


class Kind:
    """Shows only the kind of a wrong value (``a str``): for values that may be secret."""

    def __init__(self, value: object) -> None:
        self.name = type(value).__name__

    def __repr__(self) -> str:
        return f"a {self.name}"


class UsageError(Exception):
    """Bad input from the user: the message is printed as one line, exit code 2."""


class ConfigError(UsageError):
    """A configuration value is wrong.

    The message always names where the value came from (a file, a flag or an
    environment variable), the key, and what was expected, so the user can fix
    it without reading code.
    """

    def __init__(self, source: str, key: str, expected: str, got: object = None) -> None:
        self.source = source
        self.key = key
        self.expected = expected
        self.got = got
        detail = f"{source}: {key}: expected {expected}"
        if got is not None:
            scalar = isinstance(got, (str, int, float, Kind))
            shown = repr(got) if scalar else f"a {type(got).__name__}"
            if len(shown) > GOT_MAX:  # its start and its end: a long path keeps its file name
                half = GOT_MAX // 2
                shown = f"{shown[:half]}...{shown[-half:]}"
            detail += f", got {shown}"
        super().__init__(detail)


#: characters of a wrong value shown in a message (half from its start, half from its
#: end); the line stays one short line even for a value built by a YAML alias bomb (a
#: 312 MB line once)
GOT_MAX = 80
