"""Which inference engine a command line starts, and the launch flags that matter.

Pure functions over an argument vector (what ``psutil.Process.cmdline()``
returns). Nothing here touches a process: :mod:`inferwatch.agent.collectors.process`
reads the command line and hands it over.

A value is recorded only when the command line (or, for engines that read
their flags from the environment too, the process environment) says it. The
engines' defaults differ between versions, so a flag that is absent stays
``None`` (or ``"unknown"`` for prefix caching) and is never filled with a
guessed default.

Each engine's flags are a table (:class:`EngineFlags`), not code, in the
engine's own module (``engines/<name>.py``, as ``ENGINE.flags``): the option
names are copied from the engine's own argument parser, whose file and commit
are cited next to the table; its launchers (program, sub-commands, Python
modules) are rows of the same table. Option names are compared after turning ``_``
into ``-`` so that ``--max_num_seqs`` (accepted by vLLM's parser) and
trtllm-serve's native ``--max_batch_size`` match one spelling each.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal

from inferwatch.engines import ENGINES, contract
from inferwatch.engines.base import EngineFlags, Flag, Launcher
from inferwatch.engines.base import FlagKind as Kind

__all__ = [
    "ENGINE_FLAGS",
    "ENVIRON_ENGINES",
    "EngineFlags",
    "Flag",
    "LaunchInfo",
    "parse_human_int",
    "parse_launch",
]

PrefixCaching = Literal["true", "false", "unknown"]

_EMPTY: Mapping[str, str] = MappingProxyType({})


@dataclass(frozen=True)
class LaunchInfo:
    """What a worker's command line says about it; ``None`` where it says nothing."""

    engine: str | None = None
    #: the model as given to the engine (a hub id or a path)
    model: str | None = None
    #: the name clients use (the first one where the engine takes several)
    served_model_name: str | None = None
    port: int | None = None
    #: batch capacity: vLLM --max-num-seqs or the engine's equivalent
    max_num_seqs: int | None = None
    max_model_len: int | None = None
    max_num_batched_tokens: int | None = None
    gpu_memory_utilization: float | None = None
    prefix_caching: PrefixCaching = "unknown"
    tensor_parallel_size: int | None = None
    data_parallel_size: int | None = None
    #: further flags worth showing (host, pipeline size, engine-specific limits)
    extra: Mapping[str, str] = field(default_factory=lambda: _EMPTY)

    @property
    def label_model(self) -> str | None:
        """The model name the engine reports to clients: served name, else the model."""
        return self.served_model_name or self.model


#: the launch flags ``inferwatch_worker_info`` carries as labels (docs/metrics.md): the
#: agent's process source writes them, advise reads them; the contract row lists them
WORKER_INFO_FLAGS = contract.WORKER_INFO_FLAGS


# ---------------------------------------------------------------------------
# Which values are LaunchInfo fields
# ---------------------------------------------------------------------------

_FIELDS_INT = frozenset(
    {
        "port",
        "max_num_seqs",
        "max_model_len",
        "max_num_batched_tokens",
        "tensor_parallel_size",
        "data_parallel_size",
    }
)
_FIELDS_FLOAT = frozenset({"gpu_memory_utilization"})
_FIELDS_STR = frozenset({"model", "served_model_name", "prefix_caching"})


#: engine name -> its flags table, for every engine that has one (the registry's order)
ENGINE_FLAGS: Mapping[str, EngineFlags] = MappingProxyType(
    {name: engine.flags for name, engine in ENGINES.items() if engine.flags is not None}
)
#: the engines that take settings from their environment too (TGI, llama.cpp): the
#: process source reads a worker's environment for these only
ENVIRON_ENGINES = frozenset(name for name, table in ENGINE_FLAGS.items() if table.reads_environ)


# ---------------------------------------------------------------------------
# Recognizing the program
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _Launch:
    engine: str
    #: arguments after the program and its sub-commands
    args: tuple[str, ...]
    #: whether the first argument, when not an option, is the model
    positional_model: bool


_PYTHON = re.compile(r"^(python|pypy)(\d+(\.\d+)*)?[a-z]?(\.exe)?$")
# interpreter options that take a value (the value may be attached: -Wignore)
_PY_VALUE_OPTS = frozenset("XW")
_PY_LONG_VALUE_OPTS = frozenset({"--check-hash-based-pycs"})

#: inferwatch's own simulator takes vLLM's flag names (sim/simulate_cmd.py): not an
#: engine, so its launcher is written here
_SIMULATOR = ("vllm", Launcher("inferwatch", ("simulate",), modules=("inferwatch.cli",)))

#: (engine, launcher) for every launcher of every engine's table, then the simulator's
_LAUNCHERS = (
    *((name, launcher) for name, table in ENGINE_FLAGS.items() for launcher in table.launchers),
    _SIMULATOR,
)

# modules run with `python -m`, as dotted names -> their launcher's program; scripts whose
# path ends like one of these are treated the same
# (`python .../vllm/entrypoints/openai/api_server.py`)
_MODULES: Mapping[str, str] = MappingProxyType(
    {module: launcher.program for _, launcher in _LAUNCHERS for module in launcher.modules}
)
# program (basename, or module alias above) -> (engine, how it launches the engine)
_PROGRAMS: Mapping[str, tuple[str, Launcher]] = MappingProxyType(
    {launcher.program: (name, launcher) for name, launcher in _LAUNCHERS}
)


def _program(argv: Sequence[str]) -> tuple[str, tuple[str, ...]] | None:
    """(program name or module alias, its arguments), looking through a Python interpreter."""
    if not argv or not argv[0]:
        return None
    name = os.path.basename(argv[0])
    if not _PYTHON.match(name):
        return name, tuple(argv[1:])
    i = 1
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            i += 1
            break
        if arg in _PY_LONG_VALUE_OPTS:
            i += 2
            continue
        if arg.startswith("--") or arg == "-":
            if arg == "-":
                return None  # script from stdin
            i += 1
            continue
        if not arg.startswith("-"):
            break
        # a cluster of one-letter options: -u, -OO, -um module, -Wignore, -X dev
        j = 1
        while j < len(arg):
            letter = arg[j]
            if letter in ("m", "c") or letter in _PY_VALUE_OPTS:
                rest = arg[j + 1 :]
                value = rest if rest else (argv[i + 1] if i + 1 < len(argv) else "")
                consumed = 1 if rest else 2
                if letter == "c":
                    return None  # inline code: not a known launcher
                if letter == "m":
                    module = value
                    return _MODULES.get(module, module), tuple(argv[i + consumed :])
                i += consumed
                break
            j += 1
        else:
            i += 1
    if i >= len(argv):
        return None
    script = argv[i]
    dotted = script[:-3].replace("/", ".").replace("\\", ".") if script.endswith(".py") else ""
    for module, alias in _MODULES.items():
        if dotted == module or dotted.endswith("." + module):
            return alias, tuple(argv[i + 1 :])
    base = os.path.basename(script)
    if base.endswith(".py"):
        base = base[:-3]
    return base, tuple(argv[i + 1 :])


def _recognize(argv: Sequence[str]) -> _Launch | None:
    found = _program(argv)
    if found is None:
        return None
    name, args = found
    found_program = _PROGRAMS.get(name.removesuffix(".exe"))
    if found_program is None:
        return None
    engine, launcher = found_program
    if args[:1] and args[0] in launcher.optional_subcommands:
        return _Launch(engine, args[1:], launcher.optional_subcommands[args[0]])
    depth = len(launcher.subcommand)
    if args[:depth] != launcher.subcommand:
        return None
    return _Launch(engine, args[depth:], launcher.positional_model)


# ---------------------------------------------------------------------------
# Reading the options
# ---------------------------------------------------------------------------


def _norm(option: str) -> str:
    """Option spelling used for matching: underscores as dashes."""
    return option.replace("_", "-")


def _index(table: EngineFlags) -> dict[str, Flag]:
    return {_norm(name): flag for flag in table.flags for name in flag.names}


_INDEXES: Mapping[str, Mapping[str, Flag]] = MappingProxyType(
    {name: MappingProxyType(_index(table)) for name, table in ENGINE_FLAGS.items()}
)

_SWITCH: Mapping[str, str] = MappingProxyType({"true": "true", "false": "false"})
#: values of an environment variable that turn a switch on (llama.cpp's is_truthy; see
#: its table in engines/llamacpp.py): the only engine whose switches have variables
_ENV_SWITCH_ON = frozenset({"on", "enabled", "true", "1"})


def _scan(args: Sequence[str], index: Mapping[str, Flag]) -> dict[str, list[str]]:
    """Raw values per key, in command-line order (the last one wins later)."""
    found: dict[str, list[str]] = {}
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if not arg.startswith("-") or arg in ("-", "--"):
            continue
        name, eq, attached = arg.partition("=")
        flag = index.get(_norm(name))
        if flag is None:
            continue
        if flag.kind in _SWITCH:
            found[flag.key] = [_SWITCH[flag.kind]]
            continue
        if eq:
            values = [attached]
        elif flag.kind == "names":
            values = []
            while i < len(args) and not args[i].startswith("-"):
                values.append(args[i])
                i += 1
        elif i < len(args):
            # the next word is the value even when it starts with "-" (-np -1)
            values = [args[i]]
            i += 1
        else:
            values = []
        if values and flag.kind == "multi":
            found.setdefault(flag.key, []).extend(values)
        elif values:
            found[flag.key] = values
    return found


_HUMAN_INT = re.compile(r"(\d+(?:\.\d+)?)([kKmMgGtT]?)")
_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BINARY = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def parse_human_int(text: str) -> int | None:
    """An integer as vLLM's human_readable_int reads it: ``25.6k`` = 25600, ``32K`` = 32768.

    Lower-case suffixes are decimal, upper-case ones binary (no fraction allowed
    with those). ``None`` for anything else, including ``auto`` and ``-1``.
    """
    match = _HUMAN_INT.fullmatch(text.strip())
    if match is None:
        return None
    number, suffix = match.groups()
    if not suffix:
        return int(number) if "." not in number else None
    if suffix in _DECIMAL:
        return int(float(number) * _DECIMAL[suffix])
    if "." in number:
        return None
    return int(number) * _BINARY[suffix]


def _to_int(text: str) -> int | None:
    try:
        return int(text.strip())
    except ValueError:
        return None


def _to_float(text: str) -> float | None:
    try:
        value = float(text.strip())
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _first_name(values: Sequence[str], kind: Kind) -> tuple[str | None, list[str]]:
    names: list[str] = []
    for value in values:
        parts = value.split(",") if kind == "csv" else [value]
        names.extend(p.strip() for p in parts if p.strip())
    return (names[0] if names else None), names


_BOOL_WORDS: Mapping[str, PrefixCaching] = MappingProxyType(
    {"1": "true", "true": "true", "0": "false", "false": "false"}
)


def _valid(key: str, value: float) -> bool:
    """Whether a number is a real setting (not "auto", -1, 0 or out of range)."""
    if key == "port":
        return 0 < value < 65536
    if key == "gpu_memory_utilization":
        return 0 < value <= 1
    return value > 0


def _number(kind: Kind, text: str) -> int | float | None:
    if kind == "hint":
        return parse_human_int(text)
    if kind == "int":
        return _to_int(text)
    if kind == "float":
        return _to_float(text)
    return None


def _read_environ(
    table: EngineFlags, raw: dict[str, list[str]], environ: Mapping[str, str]
) -> None:
    """Fill keys the command line left out from the variables the engine reads."""
    for flag in table.flags:
        if flag.key in raw:
            continue
        for var in flag.env:
            if not environ.get(var):
                continue
            if flag.kind in _SWITCH:
                # a switch set by a variable: only the engine's words for "on" set it
                if environ[var] in _ENV_SWITCH_ON:
                    raw[flag.key] = [_SWITCH[flag.kind]]
            else:
                raw[flag.key] = [environ[var]]
            break
    for var, key in table.env_only.items():
        word = environ.get(var, "").strip().lower()
        if key not in raw and word in _BOOL_WORDS:
            raw[key] = [_BOOL_WORDS[word]]


def parse_launch(
    cmdline: Sequence[str], *, environ: Mapping[str, str] | None = None
) -> LaunchInfo | None:
    """The engine and launch flags of a command line; None when it is no known engine.

    ``environ`` is the process environment where it could be read: TGI and the
    llama.cpp server take most options from environment variables too (the
    command line wins, as in those engines).
    """
    launch = _recognize(cmdline)
    if launch is None:
        return None
    table = ENGINE_FLAGS[launch.engine]
    raw = _scan(launch.args, _INDEXES[launch.engine])
    if environ:
        _read_environ(table, raw, environ)
    kinds = {flag.key: flag.kind for flag in table.flags}

    ints: dict[str, int] = {}
    floats: dict[str, float] = {}
    texts: dict[str, str] = {}
    extra: dict[str, str] = {}
    if launch.positional_model and launch.args and not launch.args[0].startswith("-"):
        # `vllm serve MODEL` (a --model as well is moved behind it by vLLM itself)
        texts["model"] = launch.args[0]
    for key, values in raw.items():
        kind = kinds.get(key, "str")
        if kind in ("names", "csv", "multi"):
            first, names = _first_name(values, kind)
            if first is None:
                continue
            if key in _FIELDS_STR:
                texts[key] = first
                if len(names) > 1:
                    extra[key + "s"] = ",".join(names)
            else:
                extra[key] = ",".join(names)
            continue
        text = values[-1].strip()
        if not text:
            continue
        number = _number(kind, text)
        if key in _FIELDS_INT:
            if number is not None and _valid(key, number) and float(number).is_integer():
                ints[key] = int(number)
        elif key in _FIELDS_FLOAT:
            if number is not None and _valid(key, number):
                floats[key] = float(number)
        elif key in _FIELDS_STR:
            texts.setdefault(key, text)
        else:
            extra[key] = str(number) if isinstance(number, int) else text

    prefix = texts.get("prefix_caching", "unknown")
    return LaunchInfo(
        engine=launch.engine,
        model=texts.get("model") or extra.get("hf_repo"),
        served_model_name=texts.get("served_model_name"),
        port=ints.get("port"),
        max_num_seqs=ints.get("max_num_seqs"),
        max_model_len=ints.get("max_model_len"),
        max_num_batched_tokens=ints.get("max_num_batched_tokens"),
        gpu_memory_utilization=floats.get("gpu_memory_utilization"),
        prefix_caching=_BOOL_WORDS.get(prefix, "unknown"),
        tensor_parallel_size=ints.get("tensor_parallel_size"),
        data_parallel_size=ints.get("data_parallel_size"),
        extra=MappingProxyType(extra),
    )
