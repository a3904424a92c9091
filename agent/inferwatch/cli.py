"""The ``inferwatch`` command line: one sub-command per module.

Each sub-command lives in its own module that exposes ``add_arguments(parser)``
and ``main(args) -> int``. Modules keep their heavy imports (matplotlib, rich)
inside ``main`` so that ``inferwatch run`` starts fast.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from inferwatch import __version__
from inferwatch.errors import UsageError

#: library (top-level module) -> the extra that installs it (pyproject.toml); the base
#: install is the agent only
EXTRA_OF = {
    "promql_parser": "generate",
    "jinja2": "generate",
    "markdown_it": "generate",
    "matplotlib": "report",
    "rich": "report",
    "grpc": "kubernetes",
    "google": "kubernetes",
}
#: the extra each sub-command needs beyond the agent (named in its hint)
COMMAND_EXTRA = {"demo": "demo", "report": "report", "generate": "generate", "advise": "advise"}

# name -> (module, one-line help). Order is the order of ``inferwatch --help``.
COMMANDS: dict[str, tuple[str, str]] = {
    "run": (
        "inferwatch.agent.run_cmd",
        "run the sidecar agent (NVML + engine /metrics -> Prometheus)",
    ),
    "demo": (
        "inferwatch.demo.demo_cmd",
        "run simulated workers, GPUs, the agent and load: the whole loop",
    ),
    "simulate": ("inferwatch.sim.simulate_cmd", "run a simulated vLLM worker with a fake GPU"),
    "loadgen": ("inferwatch.sim.loadgen_cmd", "send open-loop load to workers on loopback"),
    "report": ("inferwatch.report.cli", "the weekly report from Prometheus: HTML, CSV, mail"),
    "generate": ("inferwatch.pack.generate", "write rules, runbooks, dashboards from thresholds"),
    "advise": ("inferwatch.advise", "ranked tuning advice from live metrics; capacity arithmetic"),
    "backtest": (
        "inferwatch.backtest",
        "replay scenarios through the rules (promtool): time to detect, false pages",
    ),
}


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser of every sub-command; with ``only``, that command's arguments alone.

    Each command's module is imported to add its arguments. ``only`` (the command a
    command line names) leaves the others' modules unimported, listed by name and
    help: ``inferwatch run`` then does not load the generator, the report, the
    simulator or the advisor, which it never uses (issue 32, its memory).
    """
    parser = argparse.ArgumentParser(
        prog="inferwatch",
        description="Observability for LLM inference on GPUs.",
    )
    parser.add_argument("--version", action="version", version=f"inferwatch {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module_name, help_text) in COMMANDS.items():
        if only is not None and name != only:
            cmd = sub.add_parser(name, help=help_text, description=help_text)
            cmd.add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
            cmd.set_defaults(_module=None)
            continue
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if _extra_for(name, exc) is None:
                raise
            # not installed (pip install inferwatch is the agent only): the command
            # stays listed and says which extra brings it
            cmd = sub.add_parser(name, help=help_text, description=help_text)
            cmd.add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
            cmd.set_defaults(_module=None, _missing=exc)
            continue
        cmd = sub.add_parser(name, help=help_text, description=help_text)
        module.add_arguments(cmd)
        cmd.set_defaults(_module=module)
    return parser


#: an option that takes one string: its flag, the value's name in ``--help`` (metavar),
#: its help text and, where it has one, its default (else None)
Option = tuple[str, str, str] | tuple[str, str, str, str]


def add_options(parser: argparse._ActionsContainer, *options: Option) -> None:
    """Add ``(flag, metavar, help[, default])`` rows to a parser or an argument group.

    Most flags of the commands are of this one kind; their rows read as a table, and
    flags with a type or an action keep their own ``add_argument``.
    """
    for flag, metavar, help_text, *default in options:
        parser.add_argument(
            flag, metavar=metavar, help=help_text, default=default[0] if default else None
        )


def _extra_for(command: str, exc: ModuleNotFoundError) -> str | None:
    """The extra whose library ``exc`` says is missing, or None: not one of ours."""
    top = (exc.name or "").split(".")[0]
    if top not in EXTRA_OF:
        return None
    return COMMAND_EXTRA.get(command, EXTRA_OF[top])


def _missing_extra(command: str, exc: ModuleNotFoundError) -> int:
    extra = _extra_for(command, exc)
    print(
        f"inferwatch {command}: error: needs {exc.name}, which the base install (the agent) "
        f"leaves out: pip install 'inferwatch[{extra}]'",
        file=sys.stderr,
    )
    return 2


def _command_of(argv: Sequence[str]) -> str | None:
    """The sub-command a command line names (its first word that is not an option)."""
    for word in argv:
        if not word.startswith("-"):
            return word if word in COMMANDS else None
    return None


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(_command_of(argv))
    args = parser.parse_args(argv)
    missing = getattr(args, "_missing", None)
    if missing is not None:
        return _missing_extra(args.command, missing)
    if not getattr(args, "_module", None):
        parser.print_help()
        return 2
    try:
        return int(args._module.main(args) or 0)
    except ModuleNotFoundError as exc:
        if _extra_for(args.command, exc) is None:
            raise
        return _missing_extra(args.command, exc)
    except UsageError as exc:
        print(f"inferwatch {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
