"""Issue 21: the weekly report against an authenticated store (vmauth in front of VictoriaMetrics).

The store is Debian's VictoriaMetrics 1.79 holding the report fixture's two
weeks (``tests/support/report_fixture.py``, imported through ``/api/v1/import/prometheus``);
in front of it, Debian's vmauth admits a bearer-token user and a basic-auth
user and answers 401 to anything else. The report runs through the real CLI.

Retries and the tenant header are checked through small HTTP stand-ins placed
between the client and vmauth: one that fails the first requests (503, or no
answer before the client's time-out) as an overloaded store or proxy does, and
one that refuses a request without ``X-Scope-OrgID`` as Mimir does ("no org
id", HTTP 401; Mimir's documented tenant header).
"""

from __future__ import annotations

import csv
import datetime as dt
import os
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from email.message import Message
from pathlib import Path

import pytest
from tests.support import report_fixture as fx
from tests.support.stubworker import QuietHandler, ThreadedServer
from tests.support.vm import VictoriaMetrics, VMAuth

from inferwatch.cli import main as cli_main
from inferwatch.errors import ConfigError
from inferwatch.report.promapi import (
    PrometheusClient,
    PrometheusUnreachable,
    QueryError,
    StoreAccess,
)
from inferwatch.report.settings import load_settings, store_access

pytestmark = pytest.mark.slow

END_ISO = "2026-11-23T00:00:00Z"
TOKEN = "tok-8f3a61c2d9"
USER, PASSWORD = "reports", "pw-71be0c55"
NO_FLAGS: dict[str, str | None] = {}


@dataclass
class Store:
    vm: VictoriaMetrics
    auth: VMAuth


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    tmp = tmp_path_factory.mktemp("store")
    vm = VictoriaMetrics(tmp, retention="100y")
    auth = None
    try:
        lines, _ = fx.generate()
        # OpenMetrics seconds -> the text format's milliseconds
        vm.import_prometheus(
            [f"{head} {int(ts) * 1000}" for _, line in lines for head, ts in [line.rsplit(" ", 1)]]
        )
        auth = VMAuth(
            tmp,
            [
                {"bearer_token": TOKEN, "url_prefix": vm.url},
                {"username": USER, "password": PASSWORD, "url_prefix": vm.url},
            ],
        )
        yield Store(vm, auth)
    finally:
        if auth is not None:
            auth.stop()
        vm.stop()


def report(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = cli_main(["report", "--end", END_ISO, "--quiet", "--retries", "0", *args])
    return code, capsys.readouterr().err


def direct(store: Store, expr: str) -> float:
    """The answer of the store itself, without the proxy."""
    return float(store.vm.query(expr, fx.END)[0]["value"][1])


def test_report_with_a_bearer_token_from_the_environment(
    store: Store,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("INFERWATCH_PROMETHEUS_BEARER_TOKEN", TOKEN)
    out = tmp_path / "out"
    code, err = report(capsys, "--prometheus-url", store.auth.url, "--output", str(out))
    assert code == 0, err
    with (out / "daily.csv").open() as f:
        rows = list(csv.DictReader(f))
    # the fixture's 7 days of both workers and both GPUs made it through the proxy
    week = {
        dt.datetime.fromtimestamp(fx.END - d * fx.DAY, dt.timezone.utc).strftime("%Y-%m-%d")
        for d in range(1, 8)
    }
    assert {r["date"] for r in rows} >= week
    # and its figures are the fixture's truth, computed by VictoriaMetrics' MetricsQL
    values = {
        (r["date"], r["worker"], r["metric"]): float(r["value"])
        for r in rows
        if r["scope"] == "worker"
    }
    truth = fx.generate()[1]
    checked = 0
    for _model, worker, _engine, _instance in fx.WORKERS:
        for d in range(14):
            day = dt.datetime.fromtimestamp(fx.day_start(d), dt.timezone.utc).strftime("%Y-%m-%d")
            for metric, expected in (
                ("requests", truth.requests[worker][d]),
                ("generation_tokens", truth.generation_tokens[worker][d]),
                ("queue_depth_peak", truth.queue_peak[worker][d]),
            ):
                assert values[(day, worker, metric)] == pytest.approx(expected, rel=1e-9), (
                    worker,
                    day,
                    metric,
                )
                checked += 1
            counts = truth.buckets[worker]["ttft"][d] if "ttft" in truth.buckets[worker] else None
            if counts is not None:
                got = values[(day, worker, "ttft_p99_seconds")]
                assert got == pytest.approx(fx.histogram_quantile(0.99, counts, fx.TTFT_LE))
                checked += 1
    assert checked >= 3 * 14 * len(fx.WORKERS)
    assert "inferwatch" in (out / "report.txt").read_text()


def test_basic_auth_from_a_password_file(store: Store, tmp_path: Path) -> None:
    secret = tmp_path / "password"
    secret.write_text(PASSWORD + "\n")
    settings = load_settings(None, {})
    access = store_access(
        settings, {}, {"username": USER, "password_file": str(secret), "tenant": None}
    )
    client = PrometheusClient(store.auth.url, timeout=10, access=access, retries=0)
    expr = "count(inferwatch_gpu_utilization_ratio)"
    assert client.instant(expr, fx.END)[0].value == direct(store, expr) > 0
    assert PASSWORD not in repr(access)


@pytest.mark.parametrize(
    "env",
    [{}, {"INFERWATCH_PROMETHEUS_BEARER_TOKEN": "not-the-token"}],
    ids=["no credentials", "wrong token"],
)
def test_refused_credentials_are_one_line_and_exit_2(
    store: Store,
    env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    code, err = report(capsys, "--prometheus-url", store.auth.url)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    # vmauth 1.79: 401 without credentials, 400 "cannot find the provided auth token"
    assert "refused the credentials (HTTP 40" in lines[0] and store.auth.url in lines[0]
    assert ("a bearer token" if env else "no credentials") in lines[0]
    assert "not-the-token" not in err


def test_wrong_basic_auth_password_names_the_user_not_the_password(
    store: Store, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("INFERWATCH_PROMETHEUS_PASSWORD", "wrong-pw-3c1e")
    code, err = report(capsys, "--prometheus-url", store.auth.url, "--basic-auth-user", USER)
    assert code == 2
    assert f"basic auth as user '{USER}'" in err
    assert "wrong-pw-3c1e" not in err


def test_credentials_in_the_url_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    code, err = report(capsys, "--prometheus-url", f"http://{USER}:{PASSWORD}@127.0.0.1:1")
    assert code == 2
    assert "credentials in the URL" in err
    assert PASSWORD not in err


# ---------------------------------------------------------------- stand-ins in front of vmauth


class FrontProxy(ThreadedServer):
    """Forwards GETs to ``backend``; ``decide(n, headers)`` may answer instead (status, body)."""

    def __init__(
        self,
        backend: str,
        decide: Callable[[int, Message], tuple[int, bytes] | None],
        delay_first: float = 0.0,
    ) -> None:
        self.requests = 0
        proxy = self

        class Handler(QuietHandler):
            def do_GET(self) -> None:
                proxy.requests += 1
                n = proxy.requests
                if n == 1 and delay_first:
                    time.sleep(delay_first)  # a store that answers after the client gave up
                answer = decide(n, self.headers)  # case-insensitive, as HTTP is
                if answer is None:
                    forward = urllib.request.Request(
                        backend + self.path,
                        headers={
                            k: v
                            for k, v in self.headers.items()
                            if k.lower() in ("authorization", "accept")
                        },
                    )
                    with urllib.request.urlopen(forward, timeout=10) as resp:
                        answer = (resp.status, resp.read())
                status, body = answer
                self.reply(status, body, "application/json")

        self.serve(Handler)


BEARER = StoreAccess(bearer_token=TOKEN)
GPUS = "count(inferwatch_gpu_utilization_ratio)"
UNAVAILABLE = (503, b'{"status":"error","errorType":"unavailable","error":"overloaded"}')


def test_5xx_is_retried_with_back_off(store: Store) -> None:
    proxy = FrontProxy(store.auth.url, lambda n, h: UNAVAILABLE if n <= 2 else None)
    waits: list[float] = []
    try:
        client = PrometheusClient(proxy.url, access=BEARER, retries=3, sleep=waits.append)
        assert client.instant(GPUS, fx.END)[0].value == direct(store, GPUS)
    finally:
        proxy.stop()
    assert proxy.requests == 3
    assert waits == [0.5, 1.0]
    assert client.retried == 2


def test_5xx_gives_up_after_the_retries(store: Store) -> None:
    proxy = FrontProxy(store.auth.url, lambda n, h: UNAVAILABLE)
    try:
        client = PrometheusClient(proxy.url, access=BEARER, retries=2, sleep=lambda s: None)
        with pytest.raises(QueryError, match="HTTP 503"):
            client.instant("up", fx.END)
    finally:
        proxy.stop()
    assert proxy.requests == 3


def test_a_timeout_is_retried(store: Store) -> None:
    proxy = FrontProxy(store.auth.url, lambda n, h: None, delay_first=2.0)
    try:
        client = PrometheusClient(
            proxy.url, timeout=0.5, access=BEARER, retries=1, sleep=lambda s: None
        )
        assert client.instant(GPUS, fx.END)[0].value == direct(store, GPUS)
    finally:
        proxy.stop()
    assert client.retried == 1


def test_nothing_listening_is_unreachable_after_the_retries() -> None:
    client = PrometheusClient("http://127.0.0.1:1", timeout=1, retries=2, sleep=lambda s: None)
    with pytest.raises(PrometheusUnreachable, match="3 attempts"):
        client.instant("up", fx.END)
    assert client.retried == 2


def test_an_answer_echoing_the_token_is_redacted(store: Store) -> None:
    echo = (400, b'{"status":"error","errorType":"bad_data","error":"bad header Bearer %s"}')
    proxy = FrontProxy(store.auth.url, lambda n, h: (echo[0], echo[1] % TOKEN.encode()))
    try:
        client = PrometheusClient(proxy.url, access=BEARER, retries=0)
        with pytest.raises(QueryError) as err:
            client.instant("up", fx.END)
    finally:
        proxy.stop()
    assert TOKEN not in str(err.value) and "<redacted>" in str(err.value)


NO_ORG = (401, b"no org id\n")


def test_tenant_header_reaches_a_mimir_style_store(
    store: Store, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    seen: list[str] = []

    def mimir(n: int, headers: Message) -> tuple[int, bytes] | None:
        org = headers.get("X-Scope-OrgID")
        seen.append(org or "")
        return None if org == "team-a" else NO_ORG

    proxy = FrontProxy(store.auth.url, mimir)
    monkeypatch.setenv("INFERWATCH_PROMETHEUS_BEARER_TOKEN", TOKEN)
    try:
        code, err = report(capsys, "--prometheus-url", proxy.url)
        assert code == 2 and "HTTP 401" in err and "X-Scope-OrgID" not in err
        monkeypatch.setenv("INFERWATCH_PROMETHEUS_TENANT", "team-a")
        env = dict(os.environ)
        access = store_access(load_settings(None, env), env, NO_FLAGS)
        client = PrometheusClient(proxy.url, access=access, retries=0)
        assert client.instant(GPUS, fx.END)[0].value == direct(store, GPUS)
    finally:
        proxy.stop()
    assert seen[0] == "" and seen[-1] == "team-a"


# ---------------------------------------------------------------- configuration errors


def test_token_and_basic_auth_together_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="either a bearer token or basic auth"):
        store_access(
            load_settings(None, {}),
            {"INFERWATCH_PROMETHEUS_BEARER_TOKEN": TOKEN, "INFERWATCH_PROMETHEUS_PASSWORD": "x"},
            {"username": USER},
        )


def test_password_without_user_and_user_without_password() -> None:
    with pytest.raises(ConfigError, match="a user name when a password is set"):
        store_access(load_settings(None, {}), {"INFERWATCH_PROMETHEUS_PASSWORD": "x"}, NO_FLAGS)
    with pytest.raises(ConfigError, match="a password for user 'reports'"):
        store_access(load_settings(None, {}), {}, {"username": USER})


def test_empty_token_file_names_the_flag(tmp_path: Path) -> None:
    empty = tmp_path / "token"
    empty.write_text("\n")
    with pytest.raises(ConfigError) as err:
        store_access(load_settings(None, {}), {}, {"bearer_token_file": str(empty)})
    assert "--bearer-token-file" in str(err.value) and "not empty" in str(err.value)


def test_config_file_keys_and_a_bad_header_name(tmp_path: Path) -> None:
    config = tmp_path / "inferwatch.yaml"
    config.write_text(
        "report:\n  prometheus_tenant: team-b\n  prometheus_tenant_header: 'Bad Header'\n"
    )
    with pytest.raises(ConfigError) as err:
        store_access(load_settings(str(config), {}), {}, NO_FLAGS)
    assert str(config) in str(err.value) and "report.prometheus_tenant_header" in str(err.value)
    config.write_text("report:\n  prometheus_tenant: team-b\n")
    access = store_access(load_settings(str(config), {}), {}, NO_FLAGS)
    assert access.headers() == {"X-Scope-OrgID": "team-b"}
