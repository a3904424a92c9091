"""The package's shape: no import cycle anywhere, and the splits the design names.

Imports are read from the source (module level, inside functions and under
``TYPE_CHECKING`` alike: a lazy or type-only import is still a dependency), so
a cycle that only shows at run time in some order is found here too.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from pathlib import Path

from tests.support.proc import REPO

PACKAGE = REPO / "agent" / "inferwatch"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """Module -> the package's modules it imports (a package's own submodules excluded)."""
    paths = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in paths}
    for name, path in paths.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            else:
                continue
            for target in targets:
                # "from inferwatch import validate" names the package and the module;
                # a module importing its own package's __init__ is not a cycle worth naming
                if target in paths and target != name and not name.startswith(target + "."):
                    graph[name].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_in_the_package() -> None:
    graph = import_graph()
    assert len(graph) > 100  # the whole package was read
    assert cycles(graph) == []


def test_agent_exposition_and_server_are_separate() -> None:
    graph = import_graph()
    # the server serves whatever has an exposition; the wiring does not know HTTP
    assert "inferwatch.agent.wiring" not in graph["inferwatch.agent.exporter"]
    assert "inferwatch.agent.exporter" not in graph["inferwatch.agent.wiring"]
    assert "inferwatch.agent.exposition" in graph["inferwatch.agent.wiring"]
    assert {"inferwatch.agent.wiring", "inferwatch.agent.exporter"} <= graph[
        "inferwatch.agent.run_cmd"
    ]
    # the text writer knows neither timers nor HTTP
    assert graph["inferwatch.agent.exposition"] <= {"inferwatch.agent.collectors.base"}


def test_report_figures_and_findings_are_separate() -> None:
    graph = import_graph()
    assert "inferwatch.report.insights" not in graph["inferwatch.report.summary"]
    assert {"inferwatch.report.summary", "inferwatch.report.insights"} <= graph[
        "inferwatch.report.build"
    ]


# The layers: (importer prefix, imported prefix) pairs that must never meet. The agent
# is what runs next to every worker, so it carries nothing of the generators, the
# report, the advisor or the demo; the pack is policy and writers over it, so it reads
# neither the agent's code nor the simulator's (engine facts come from engines/); the
# simulator stands in for engines and GPUs, so it never needs the agent.
LAYERS = (
    ("inferwatch.agent", "inferwatch.pack"),
    ("inferwatch.agent", "inferwatch.report"),
    ("inferwatch.agent", "inferwatch.advise"),
    ("inferwatch.agent", "inferwatch.demo"),
    ("inferwatch.pack", "inferwatch.agent"),
    ("inferwatch.pack", "inferwatch.sim"),
    ("inferwatch.sim", "inferwatch.agent"),
)


def _under(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def layer_breaks(graph: dict[str, set[str]]) -> list[str]:
    """Every import that crosses a forbidden layer, as "importer -> imported"."""
    return sorted(
        f"{importer} -> {imported}"
        for importer, imports in graph.items()
        for imported in imports
        for low, high in LAYERS
        if _under(importer, low) and _under(imported, high)
    )


def test_the_layer_check_finds_a_break() -> None:
    graph = {
        "inferwatch.agent.wiring": {"inferwatch.pack.thresholds", "inferwatch.engines.vllm"},
        "inferwatch.pack.slo_spec": {"inferwatch.sim.expo.vllm"},
        "inferwatch.sim.worker": {"inferwatch.agent.config"},
        "inferwatch.demo.demo_cmd": {"inferwatch.agent.wiring"},
    }
    assert layer_breaks(graph) == [
        "inferwatch.agent.wiring -> inferwatch.pack.thresholds",
        "inferwatch.pack.slo_spec -> inferwatch.sim.expo.vllm",
        "inferwatch.sim.worker -> inferwatch.agent.config",
    ]


def test_no_layer_is_crossed() -> None:
    graph = import_graph()
    assert any(_under(m, "inferwatch.agent") for m in graph)  # the agent package was read
    assert layer_breaks(graph) == []


def test_few_loose_modules_at_the_package_top() -> None:
    # the top holds the shared kernel only (cli, errors, validate, stats); everything
    # else lives in the room of the product it belongs to
    loose = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(loose) <= 6, loose


def layout_paths() -> set[str]:
    """Every path named in backticks in the first cell of docs/development.md's layout table."""
    text = (REPO / "docs" / "development.md").read_text(encoding="utf-8")
    table = text.split("## Layout", 1)[1].split("\n## ", 1)[0]
    out: set[str] = set()
    for line in table.splitlines():
        if line.startswith("| `"):
            out.update(re.findall(r"`([^`]+)`", line.split("|")[1]))
    return out


def test_the_layout_table_lists_every_module_and_nothing_gone() -> None:
    named = layout_paths()
    modules = {
        str(p.relative_to(REPO))
        for root in (PACKAGE, REPO / "tests" / "support")
        for p in root.rglob("*.py")
        if "kubelet" not in p.parts
    }
    assert len(modules) > 120  # the tree was read
    missing = {m for m in modules if m not in named}
    assert not missing, f"docs/development.md has no row for {sorted(missing)}"
    gone = {p for p in named if not (REPO / p).exists()}
    assert not gone, f"docs/development.md names files that are gone: {sorted(gone)}"


# Test modules share helpers through tests/support/ only: a test module that imports
# another runs (and collects) the other's module-level code, and ties the two files
# together where a move or a split would break both.
TESTS = REPO / "tests"


def _names_a_test_module(module: str) -> bool:
    return any(part.startswith("test_") for part in module.split("."))


def imports_of_test_modules(sources: dict[str, str]) -> list[str]:
    """Every import of a test module (``test_*``) in the given files, as "file -> module"."""
    found: list[str] = []
    for path, source in sorted(sources.items()):
        for node in ast.walk(ast.parse(source)):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                module = node.module or ""
                if _names_a_test_module(module):
                    targets = [module]
                elif (node.level or module.split(".")[0] == "tests") and "support" not in module:
                    # "from tests import test_x" and "from . import test_x" name it last
                    targets = [f"{module}.{a.name}".lstrip(".") for a in node.names]
            found += [f"{path} -> {t}" for t in targets if _names_a_test_module(t)]
    return sorted(set(found))


def test_the_test_import_check_finds_a_planted_case() -> None:
    # one file a line: its path, then its source with ";" between statements
    planted = """
    tests/test_a.py | from tests.test_b import helper; from tests.support.proc import REPO
    tests/test_c.py | import test_report_e2e; from tests import test_d
    tests/test_e.py | if True: from test_f import g
    tests/test_g.py | from . import test_h; from tests.support.x import test_like_name
    tests/support/s.py | from tests.test_i import j
    tests/test_ok.py | import pytest; from tests.support.agentrun import AgentRun
    """
    sources = dict(line.strip().split(" | ") for line in planted.strip().splitlines())
    assert imports_of_test_modules(sources) == [
        "tests/support/s.py -> tests.test_i",
        "tests/test_a.py -> tests.test_b",
        "tests/test_c.py -> test_report_e2e",
        "tests/test_c.py -> tests.test_d",
        "tests/test_e.py -> test_f",
        "tests/test_g.py -> test_h",
    ]


def test_no_test_module_imports_another() -> None:
    sources = {
        str(p.relative_to(REPO)): p.read_text(encoding="utf-8")
        for root in (TESTS, REPO / "bench")
        for p in root.rglob("*.py")
    }
    assert len(sources) > 100  # the tests were read
    assert imports_of_test_modules(sources) == []


TEST_GROUPS = ("unit", "live", "deploy", "device")


def test_every_test_module_is_in_a_group() -> None:
    """docs/development.md's test groups: each test module in tests/<group>/, nowhere else."""
    modules = sorted(TESTS.rglob("test_*.py"))
    assert len(modules) > 80  # the tests were found
    outside = [
        str(p.relative_to(TESTS))
        for p in modules
        if p.parent.parent != TESTS or p.parent.name not in TEST_GROUPS
    ]
    assert outside == []
    for group in TEST_GROUPS:
        assert f"`tests/{group}/`" in (REPO / "docs" / "development.md").read_text()


# Issue 41: a contract family's name is typed once, in engines/contract.py (and in the
# engine tables, which map engine names onto it); everything else imports the rows.
# The count of code lines that still spell one as a string literal may only fall.
LITERAL_LINES_AT_MOST = 0
_FAMILY_TOKEN = re.compile(r"inferwatch_[a-z0-9_]+")


def _docstring_lines(tree: ast.AST) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            first = body[0] if body else None
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                lines.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    return lines


def family_literal_lines(source: str, families: set[str]) -> list[int]:
    """Lines of ``source`` whose string literals (docstrings aside) spell a family's name
    (a counter's without ``_total``, a histogram's with ``_bucket``/``_sum``/``_count``)."""
    import io
    import tokenize

    def is_family(token: str) -> bool:
        for suffix in ("", "_total", "_bucket", "_sum", "_count"):
            if token.endswith(suffix) and token[: len(token) - len(suffix)] in families:
                return True
        return False

    docs = _docstring_lines(ast.parse(source))
    found: set[int] = set()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type != tokenize.STRING:
            continue
        for offset, text in enumerate(tok.string.splitlines()):
            line = tok.start[0] + offset
            if line not in docs and any(map(is_family, _FAMILY_TOKEN.findall(text))):
                found.add(line)
    return sorted(found)


def family_literals(root: Path, families: set[str]) -> dict[str, int]:
    """Package file -> its family-literal lines, outside engines/contract.py and the
    engine tables."""
    from inferwatch.engines import ENGINES

    exempt = {"engines/contract.py", *(f"engines/{name}.py" for name in ENGINES)}
    out: dict[str, int] = {}
    for path in sorted(root.rglob("*.py")):
        rel = str(path.relative_to(root))
        if rel not in exempt:
            n = len(family_literal_lines(path.read_text(encoding="utf-8"), families))
            if n:
                out[rel] = n
    return out


def _all_names() -> set[str]:
    from inferwatch.engines import contract

    return {n for f in contract.FAMILIES for n in (f.name, f.base)}


def test_the_literal_counter_finds_planted_names() -> None:
    source = '''"""A docstring naming inferwatch_queue_depth is not counted."""
QUEUE = "inferwatch_queue_depth"
RATE = f"rate(inferwatch_ttft_seconds_bucket[5m])"
RECORD = "worker:inferwatch_preemptions:rate5m"
NOT_ONE = "inferwatch_queue_depth_avg"  # nor a longer name
TEXT = """two
inferwatch_gpu_up lines"""
'''
    assert family_literal_lines(source, _all_names()) == [2, 3, 4, 7]


def test_family_names_are_typed_in_the_contract() -> None:
    found = family_literals(PACKAGE, _all_names())
    assert "pack/names.py" not in found  # the pack's names come from the contract
    total = sum(found.values())
    worst = sorted(found.items(), key=lambda kv: -kv[1])[:8]
    assert total <= LITERAL_LINES_AT_MOST, f"{total} lines spell a family's name: {worst}"


# Issue 41: following vLLM's TTFT from the parse to its runbook opens at most ten files,
# and docs/development.md lists them as they are.
FOLLOW_AT_MOST = 10
_STEP = re.compile(r"^\d+\. `(agent/inferwatch/[^`]+)`: ?(.*?)(?=^\d+\. |\Z)", re.M | re.S)


def follow_steps(doc: str) -> list[tuple[str, list[str]]]:
    """The numbered steps of docs/development.md's "Following one signal": each file and
    the code names (backticked, not a path or a series) its text says it holds."""
    section = doc.split("## Following one signal", 1)[1].split("\n## ", 1)[0]
    steps = []
    for path, text in _STEP.findall(section):
        names = [
            n
            for n in re.findall(r"`([A-Za-z_][A-Za-z0-9_]*)`", text)
            if not n.startswith("inferwatch_")
        ]
        steps.append((path, names))
    return steps


def test_the_step_reader_finds_a_planted_list() -> None:
    doc = "## Following one signal\n\n0. `agent/inferwatch/a.py`: `f` does it;\n1. `agent/inferwatch/b.py`: the row\n   `x` and `inferwatch_y`;\n\n## Next\n2. `agent/inferwatch/c.py`: not this\n"
    assert follow_steps(doc) == [("agent/inferwatch/a.py", ["f"]), ("agent/inferwatch/b.py", ["x"])]


def test_following_ttft_lists_the_files_as_they_are() -> None:
    steps = follow_steps((REPO / "docs" / "development.md").read_text(encoding="utf-8"))
    assert 8 <= len(steps) <= FOLLOW_AT_MOST, [p for p, _ in steps]
    for path, names in steps:
        source = (REPO / path).read_text(encoding="utf-8")
        missing = [n for n in names if not re.search(rf"\b{n}\b", source)]
        assert not missing, f"docs/development.md says {path} holds {missing}"
    records = [p for p, _ in steps if p.endswith("recording.py")]
    assert records, "the recording rules are a step"


# Issue 41: the readers of one worker's state (the agent's exposition, Prometheus for
# advise, the report's day series, the twin's and the demo's views) count their function
# bodies here (docstrings included, a nested function in its own and its parent's count);
# the ceiling can only fall. None: every function.
#
# The issue's "841 lines" is this count over the functions that turned data into
# WorkerPicture, Observed, Reading and RawWorker, taken on c54de74^: pictures_from_scrapes
# 152, pictures_from_answers 98, prometheus_queries 51, duration 1, by 1, observe 168,
# parse_agent_metrics 62, Collector.workers 140, gpus 131, hourly 37 (841 exactly). The
# same rule today counts more than it did then: every function of pack/reading.py (their
# helpers were not counted in advise/agent.py then), the report's helpers and the glue
# (read_agent, read_prometheus, _answers). As then, it leaves out what reads no worker's
# state: the agent's HTTP sampling (advise/agent.py sample_agent, fetch_exposition,
# sample_times, metrics_url), the alerts (advise/prometheus.py read_alerts,
# alerts_from_answers, alert_queries, _alert_key) and whatif's precheck (a refusal before
# sampling); those came to 95 lines on the day this count fell under 550.
READERS: dict[str, set[str] | None] = {
    "pack/reading.py": None,
    "advise/agent.py": {"pictures_from_scrapes", "read_agent"},
    "advise/prometheus.py": {"pictures_from_answers", "read_prometheus", "_answers"},
    "demo/demo_cmd.py": {"parse_agent_metrics"},
    "advise/whatif.py": {"observe"},
    "report/query.py": {
        "workers",
        "gpus",
        "hourly",
        "_worker_identities",
        "_buckets",
        "daily_by",
        "_key",
        "_instance",
    },
    # the day series of WorkerReading that Collector.workers' answers become
    "report/model.py": {"of_series"},
}
READER_LINES_AT_MOST = 496


def body_lines(source: str, names: set[str] | None) -> dict[str, int]:
    """Function name -> lines from its body's first statement to its end."""
    return {
        node.name: (node.end_lineno or node.lineno) - node.body[0].lineno + 1
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and (names is None or node.name in names)
    }


def test_the_reader_counter_counts_bodies_and_nested_functions() -> None:
    source = (
        'def a():\n    """Doc."""\n    def b():\n        return 1\n    return b\n\ndef c(): pass\n'
    )
    assert body_lines(source, None) == {"a": 4, "b": 1, "c": 1}
    assert body_lines(source, {"c"}) == {"c": 1}


def test_reader_code_only_falls() -> None:
    per_file = {
        path: sum(body_lines((PACKAGE / path).read_text(encoding="utf-8"), names).values())
        for path, names in READERS.items()
    }
    total = sum(per_file.values())
    assert total <= READER_LINES_AT_MOST, f"{total} lines of reader code: {per_file}"


# Issue 41: PromQL over the raw contract series is written in one module. A range
# function (rate, increase, *_over_time, deriv, changes, ...) applied to a contract family
# appears only in pack/signals.py; everything else renders a signal from it or reads a
# recorded rule. A string literal or f-string whose text selects a family for a range
# (``(<family>{...}[``) is such a use; an f-string's ``{contract.X}`` counts as X's name.
RANGE_OVER_FAMILY_ONLY_IN = "pack/signals.py"
_HOLE = "\x00"


def _string_text(node: ast.Constant | ast.JoinedStr, names: dict[str, str]) -> str:
    """A string literal's text; an f-string's with each ``{contract.X}`` (or
    ``{contract.X.name}``, or ``{X}`` for a name bound to a family) written as the family's
    name and any other hole as one mark."""
    if isinstance(node, ast.Constant):
        return str(node.value)
    parts = []
    for value in node.values:
        if isinstance(value, ast.Constant):
            parts.append(str(value.value))
            continue
        expr = value.value if isinstance(value, ast.FormattedValue) else value
        if isinstance(expr, ast.Attribute) and expr.attr == "name":
            expr = expr.value
        name = None
        if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name):
            if expr.value.id == "contract":
                name = names.get(expr.attr)
        elif isinstance(expr, ast.Name):
            name = names.get(expr.id)
        parts.append(name if name is not None else _HOLE)
    return "".join(parts)


def _selected(names: Iterable[str]) -> str:
    """A regex: an opening bracket, then one of the family ``names`` (a histogram's
    ``_bucket``/``_sum``/``_count`` too), longest first so a longer name wins."""
    families = "|".join(sorted(map(re.escape, names), key=len, reverse=True))
    return rf"\(\s*(?:{families})(?:_bucket|_sum|_count)?"


def range_over_family_lines(source: str) -> list[int]:
    """Lines of ``source`` where a string (docstrings aside) selects a contract family (a histogram's
    ``_bucket``/``_sum``/``_count`` too) for a range: ``(family{...}[`` with any holes
    between the name and the range."""
    from inferwatch.engines import contract

    names = {attr: f.name for attr, f in vars(contract).items() if isinstance(f, contract.Family)}
    pattern = re.compile(rf"{_selected(names.values())}(?:\{{[^{{}}]*\}}|{_HOLE})*\s*\[")
    tree = ast.parse(source)
    docs = _docstring_lines(tree)
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and not isinstance(node.value, str):
            continue
        if (
            isinstance(node, ast.Constant | ast.JoinedStr)
            and node.lineno not in docs
            and pattern.search(_string_text(node, names))
        ):
            found.add(node.lineno)
    return sorted(found)


def test_the_range_scan_finds_planted_selections() -> None:
    source = '''"""A docstring with rate(inferwatch_queue_depth[5m]) is text, not code."""
from inferwatch.engines import contract
A = f"rate({contract.PREEMPTIONS}{sel}[{w}])"
B = "sum by (le) (increase(inferwatch_ttft_seconds_bucket{job=\\"x\\"}[1d]))"
C = f"max_over_time({contract.QUEUE_DEPTH.name}[1h])"
D = f"changes({contract.WORKER_START_TIME_SECONDS}{s()}" f"[{window}])"
E = f"max by (worker) ({contract.QUEUE_DEPTH}{sel})"
F = f"avg_over_time({recorded}{sel}[5m])"
G = f"avg_over_time(({contract.GPU_UTILIZATION_RATIO} >= bool 0.3)[1d:1m])"
H = "rate(inferwatch_queue_depth_slope_total[5m])"
'''
    # A..D select a family for a range; E has no range, F a recorded rule, G a subquery
    # over a comparison, H no family of that name
    assert range_over_family_lines(source) == [3, 4, 5, 6]


def test_range_functions_over_families_only_in_signals() -> None:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = str(path.relative_to(PACKAGE))
        if rel == RANGE_OVER_FAMILY_ONLY_IN:
            continue
        lines = range_over_family_lines(path.read_text(encoding="utf-8"))
        if lines:
            found[rel] = lines
    assert not found, (
        f"PromQL over contract families outside pack/signals.py (render a signal from it): {found}"
    )


def template_range_lines(text: str) -> list[int]:
    """Lines of a runbook template that select a contract family for a range in their
    own text (``rate(family{{ c.sel }}[...])``): the page should render ``S.<signal>``."""
    from inferwatch.engines import contract

    names = [f.name for f in vars(contract).values() if isinstance(f, contract.Family)]
    pattern = re.compile(rf"{_selected(names)}(?:\{{|\[)")
    return [i for i, line in enumerate(text.splitlines(), 1) if pattern.search(line)]


def test_the_template_scan_finds_a_planted_query() -> None:
    text = (
        "{{ S.XID_ERRORS.render(selector=c.sel, window='1h') }}\n"
        "increase(inferwatch_gpu_xid_errors_total{{ c.sel }}[1h])\n"
        "inferwatch_gpu_up{{ c.sel }} == 0\n"
        "histogram_quantile(0.99, sum by (le) (rate(inferwatch_ttft_seconds_bucket[5m])))\n"
    )
    assert template_range_lines(text) == [2, 4]


def test_runbook_queries_over_families_render_from_signals() -> None:
    pages = PACKAGE / "pack" / "runbooks" / "pages"
    found = {
        p.name: lines
        for p in sorted(pages.glob("*.j2"))
        if (lines := template_range_lines(p.read_text(encoding="utf-8")))
    }
    assert not found, f"runbook queries over contract families not from pack.signals: {found}"
