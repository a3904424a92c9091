"""The base install is the agent: without the extras every command still parses, and
one that needs an extra says which, in one line, with exit code 2.

Each case runs a fresh interpreter in which the extras' libraries cannot be
imported (``sys.modules[name] = None`` makes Python's import system raise
ModuleNotFoundError for them, as in an install without them).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

EXTRAS_GONE = "import sys\nfor m in ('grafanalib', 'jinja2', 'matplotlib', 'rich', 'grpc'):\n    sys.modules[m] = None\n"


def run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", EXTRAS_GONE + code], capture_output=True, text=True, timeout=120
    )


def test_the_agent_runs_without_the_extras() -> None:
    out = run("from inferwatch.cli import main\nsys.exit(main(['run', '--help']))")
    assert out.returncode == 0, out.stderr
    assert "--worker" in out.stdout


# generate fails as its module is imported (the parser is built), demo once it runs
@pytest.mark.parametrize(("command", "extra"), [("generate", "generate"), ("demo", "demo")])
def test_a_command_without_its_extra_names_it(command: str, extra: str) -> None:
    out = run(f"from inferwatch.cli import main\nsys.exit(main([{command!r}]))")
    assert out.returncode == 2, out.stdout + out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert f"pip install 'inferwatch[{extra}]'" in lines[0]


def test_kubernetes_discovery_without_its_extra_is_a_config_error(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        "kubernetes:\n  api_url: http://127.0.0.1:9\n  node_name: n\n  token_file: c.yaml\n"
    )
    out = run(
        f"import os\nos.chdir({str(tmp_path)!r})\nfrom inferwatch.cli import main\n"
        f"sys.exit(main(['run', '--config', {str(cfg)!r}]))"
    )
    assert out.returncode == 2, out.stderr
    assert (
        "kubernetes.pod_resources_socket" in out.stderr and "inferwatch[kubernetes]" in out.stderr
    )
    assert len(out.stderr.strip().splitlines()) == 1


def test_inferwatch_run_imports_no_other_commands_modules() -> None:
    """Issue 32: ``inferwatch run`` loads its own command's modules, not the generator's,
    the report's, the simulator's or the advisor's (memory the agent never uses)."""
    out = run(
        "from inferwatch.cli import main\n"
        "try:\n    main(['run', '--help'])\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in sys.modules if m.startswith('inferwatch.')), file=sys.stderr)\n"
    )
    assert out.returncode == 0, out.stderr
    loaded = out.stderr.strip().splitlines()[-1]
    assert "inferwatch.agent.run_cmd" in loaded
    for other in ("inferwatch.pack", "inferwatch.report", "inferwatch.advise", "inferwatch.demo",
                  "inferwatch.sim.loadgen", "inferwatch.sim.simulate_cmd"):  # fmt: skip
        assert f"'{other}" not in loaded, (other, loaded)
    # the full command list is still offered
    listed = run("from inferwatch.cli import main\nsys.exit(main(['--help']))")
    assert listed.returncode == 0 and "generate" in listed.stdout and "report" in listed.stdout
