"""TLS, basic auth, secrets and load on the agent's HTTP server, with real clients."""

from __future__ import annotations

import base64
import concurrent.futures
import gzip
import http.client
import ssl
import subprocess
import threading
import urllib.error
import urllib.request
from pathlib import Path

import bcrypt
import pytest
import yaml
from tests.support.agentrun import AgentRun
from tests.support.proc import (
    Prometheus,
    http_get,
    inferwatch_cmd,
    running,
    wait_until,
)
from tests.support.tls import self_signed_cert

PASSWORD = "s3cret-Scrape!"


def start_agent(tmp: Path, web_config: dict | None, *args: str) -> tuple[AgentRun, int]:
    """The agent on fake GPUs, not waited for (over TLS /healthz needs the test's client)."""
    cmd = ["--gpu-backend", "fake", *args]
    if web_config is not None:
        path = tmp / "web.yml"
        path.write_text(yaml.safe_dump(web_config))
        cmd += ["--web-config-file", str(path)]
    agent = AgentRun(tmp, *cmd, ready=None)
    return agent, agent.port


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def https_get(port: int, ctx: ssl.SSLContext, auth: str | None = None) -> int:
    req = urllib.request.Request(f"https://127.0.0.1:{port}/metrics")
    if auth:
        req.add_header("Authorization", auth)
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=10) as resp:
            assert b"inferwatch_agent_info" in resp.read()
            return resp.status
    except urllib.error.HTTPError as err:
        return err.code


@pytest.mark.slow
def test_tls_and_basic_auth_with_real_clients(tmp_path: Path) -> None:
    cert, key = self_signed_cert(tmp_path)
    hashed = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(rounds=6)).decode()
    hashed_2y = "$2y$" + hashed[4:]  # htpasswd's spelling of the same algorithm
    web = {
        "tls_server_config": {"cert_file": str(cert), "key_file": str(key)},
        "basic_auth_users": {"prometheus": hashed_2y},
        "http_server_config": {"headers": {"X-Content-Type-Options": "nosniff"}},
    }
    agent, port = start_agent(tmp_path, web)
    ctx = ssl.create_default_context(cafile=str(cert))
    try:
        wait_until(
            lambda: https_get(port, ctx, basic("prometheus", PASSWORD)) == 200,
            30,
            message="agent over TLS",
        )
        assert https_get(port, ctx) == 401
        assert https_get(port, ctx, basic("prometheus", "wrong")) == 401
        assert https_get(port, ctx, basic("nobody", PASSWORD)) == 401
        assert https_get(port, ctx, "Basic !!!notbase64") == 401
        # plain HTTP to a TLS port gets nothing
        with pytest.raises((http.client.HTTPException, ConnectionError, OSError)):
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            conn.request("GET", "/metrics")
            conn.getresponse().read()
        # an unverified certificate is refused by a careful client
        with pytest.raises(urllib.error.URLError):
            https_get(port, ssl.create_default_context())
        # headers from http_server_config
        req = urllib.request.Request(
            f"https://127.0.0.1:{port}/healthz",
            headers={"Authorization": basic("prometheus", PASSWORD)},
        )
        with urllib.request.urlopen(req, context=ctx, timeout=10) as resp:
            assert resp.headers["X-Content-Type-Options"] == "nosniff"

        # Prometheus itself scrapes with TLS + basic auth from a password file
        pw_file = tmp_path / "scrape-password"
        pw_file.write_text(PASSWORD)
        config = {
            "global": {"scrape_interval": "1s"},
            "scrape_configs": [
                {
                    "job_name": "inferwatch",
                    "scheme": "https",
                    "tls_config": {"ca_file": str(cert)},
                    "basic_auth": {"username": "prometheus", "password_file": str(pw_file)},
                    "static_configs": [{"targets": [f"127.0.0.1:{port}"]}],
                }
            ],
        }
        prom = Prometheus(tmp_path, yaml.safe_dump(config))
        with running(prom):
            wait_until(prom.targets_up, 30, message="prometheus scraping over TLS with auth")
            wait_until(lambda: prom.query('inferwatch_agent_info{job="inferwatch"}'), 20)
    finally:
        agent.stop()
    log = agent.log()
    assert PASSWORD not in log and hashed_2y not in log


@pytest.mark.parametrize(
    ("web", "key"),
    [
        (
            {"tls_server_config": {"cert_file": "/nonexistent.crt", "key_file": "/x.key"}},
            "tls_server_config.cert_file",
        ),
        ({"basic_auth_users": {"alice": "plaintext"}}, "basic_auth_users.alice"),
        (
            {"tls_server_config": {"cert_file": "a", "key_file": "b", "min_version": "SSL3"}},
            "tls_server_config",
        ),
        ({"basic_auth": {}}, "basic_auth"),
    ],
)
def test_bad_web_config_is_one_line_exit_2(tmp_path: Path, web: dict, key: str) -> None:
    path = tmp_path / "web.yml"
    path.write_text(yaml.safe_dump(web))
    result = subprocess.run(
        inferwatch_cmd("run", "--gpu-backend", "none", "--web-config-file", str(path)),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and f"{path}: {key}" in lines[0], result.stderr
    assert "plaintext" not in result.stderr  # a would-be secret is never echoed


@pytest.mark.slow
def test_200_concurrent_scrapers_all_get_whole_responses(tmp_path: Path) -> None:
    agent, port = start_agent(tmp_path, None, "--fake-gpus", "8")
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        wait_until(lambda: http_get(f"http://127.0.0.1:{port}/readyz")[0] == 200, 30)

        def scrape(i: int) -> bytes:
            req = urllib.request.Request(url)
            if i % 2:
                req.add_header("Accept-Encoding", "gzip")
            with urllib.request.urlopen(req, timeout=30) as resp:
                body = resp.read()
                if resp.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                return body

        with concurrent.futures.ThreadPoolExecutor(max_workers=200) as pool:
            bodies = list(pool.map(scrape, range(400)))
        assert len(bodies) == 400
        for body in bodies:
            assert b"# EOF" not in body  # text format, not OpenMetrics
            assert body.endswith(b"\n") and b"inferwatch_gpu_up" in body
            assert body.count(b"inferwatch_gpu_up{") == 8
    finally:
        agent.stop()


@pytest.mark.slow
def test_sigterm_lets_scrapes_in_flight_finish(tmp_path: Path) -> None:
    agent, port = start_agent(tmp_path, None, "--fake-gpus", "8")
    url = f"http://127.0.0.1:{port}/metrics"
    wait_until(lambda: http_get(f"http://127.0.0.1:{port}/readyz")[0] == 200, 30)
    results: list[object] = []
    stop = threading.Event()

    def hammer() -> None:
        while not stop.is_set():
            try:
                with urllib.request.urlopen(url, timeout=10) as resp:
                    body = resp.read()
                    length = int(resp.headers["Content-Length"])
                    results.append(len(body) == length and body.endswith(b"\n"))
            except (urllib.error.URLError, ConnectionError, http.client.HTTPException, OSError):
                results.append("refused")  # after the listener closed: fine, not truncated

    threads = [threading.Thread(target=hammer) for _ in range(16)]
    for t in threads:
        t.start()
    wait_until(lambda: len(results) > 50, 30, message="scrapes under way")
    code = agent.stop()
    stop.set()
    for t in threads:
        t.join(15)
    assert code == 0
    assert False not in results  # no truncated body, ever
    assert results.count(True) > 50


def test_no_secret_on_the_command_line_of_any_command() -> None:
    result = subprocess.run(inferwatch_cmd("--help"), capture_output=True, text=True, timeout=60)
    commands = [
        line.split()[0]
        for line in result.stdout.splitlines()
        if line.startswith("    ") and line.split()
    ]
    assert "run" in commands
    for command in commands:
        help_text = subprocess.run(
            inferwatch_cmd(command, "--help"), capture_output=True, text=True, timeout=60
        ).stdout
        assert "--password " not in help_text and "--password=" not in help_text, command
        assert "--smtp-password " not in help_text, command
