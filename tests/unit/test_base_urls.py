"""`pack.runbook_base_url` and `pack.dashboard_base_url` are checked as `--grafana-url` is:
an http(s) URL with a host and a path ending in `/`, or one line naming the file and the
key, exit 2 (issue 39). Every link is the base followed by a page name, so a base
without its trailing slash once gave `.../runbooksInferenceGPUUnderutilized.md`."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from inferwatch.cli import main
from inferwatch.errors import ConfigError
from inferwatch.pack.thresholds import load_thresholds

BAD = [
    "https://wiki.example.com/runbooks",  # no trailing slash: links glue onto the last segment
    "wiki.example.com/runbooks/",  # no scheme
    "ftp://wiki.example.com/runbooks/",
    "file:///srv/runbooks/",  # no host
    "https:///runbooks/",
    "https://wiki.example.com/runbooks/?ref=main",
    "https://wiki.example.com/runbooks/#top",
    "https://wiki.example.com:port/runbooks/",
    "https://wiki example.com/runbooks/",
    "",
    "   ",
]


def write(tmp_path: Path, key: str, value: object) -> str:
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump({"pack": {key: value}}))
    return str(path)


@pytest.mark.parametrize("key", ["runbook_base_url", "dashboard_base_url"])
@pytest.mark.parametrize("value", [*BAD, 42])
def test_a_bad_base_url_is_one_line_naming_file_and_key(
    tmp_path: Path, key: str, value: object
) -> None:
    path = write(tmp_path, key, value)
    with pytest.raises(ConfigError) as err:
        load_thresholds(path)
    message = str(err.value)
    assert message.startswith(f"{path}: pack.{key}: expected an http(s) URL"), message
    assert "ending in /" in message and "\n" not in message


@pytest.mark.parametrize(
    "value",
    [
        "https://wiki.example.com/runbooks/",
        "http://localhost:8088/",
        "http://10.0.0.7:8088/inferwatch/runbooks/",
        "https://[2001:db8::1]:8443/rb/",
    ],
)
def test_a_good_base_url_joins_into_the_page_url(tmp_path: Path, value: str) -> None:
    t = load_thresholds(write(tmp_path, "runbook_base_url", value))
    assert t.pack.runbook_base_url == value
    assert t.pack.runbook_page("InferenceGPUUnderutilized") == (
        value + "InferenceGPUUnderutilized.html"
    )


def test_generate_refuses_a_base_without_slash_with_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, "runbook_base_url", "https://wiki.example.com/runbooks")
    out = tmp_path / "out"
    out.mkdir()
    assert main(["generate", "--thresholds", path, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert f"{path}: pack.runbook_base_url: expected " in err
    assert "'https://wiki.example.com/runbooks'" in err
    assert not list(out.iterdir()), "nothing is written"
