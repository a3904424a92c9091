"""The shipped runbook site (deploy/runbooks/nginx.conf, Debian's nginx) on a loopback
port, serving a runbooks/ folder: the deploy tests fetch and open pages through it, and
bench/runbook_walkthrough.py opens the demo's firing alert's page there."""

from __future__ import annotations

import shutil
import subprocess
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.support.proc import REPO, free_port, wait_until

NGINX = shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None)


@contextmanager
def runbook_site(workdir: Path, root: Path = REPO / "runbooks") -> Iterator[str]:
    """nginx with the shipped site on 127.0.0.1:<free port>, serving ``root``; yields its
    base URL (``http://127.0.0.1:PORT/``)."""
    if NGINX is None:
        raise FileNotFoundError("nginx is not installed (apt-get install nginx)")
    port = free_port()
    site = (REPO / "deploy" / "runbooks" / "nginx.conf").read_text()
    site = site.replace("listen 8088;", f"listen 127.0.0.1:{port};")
    site = site.replace("root /srv/runbooks;", f"root {root};")
    (workdir / "site.conf").write_text(site)
    main = f"""
pid {workdir}/nginx.pid;
error_log {workdir}/error.log;
daemon off;
events {{}}
http {{
    access_log off;
    client_body_temp_path {workdir}/body;
    proxy_temp_path {workdir}/proxy;
    fastcgi_temp_path {workdir}/fastcgi;
    uwsgi_temp_path {workdir}/uwsgi;
    scgi_temp_path {workdir}/scgi;
    include {workdir}/site.conf;
}}
"""
    (workdir / "nginx.conf").write_text(main)
    proc = subprocess.Popen(
        [NGINX, "-p", str(workdir), "-c", str(workdir / "nginx.conf")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}/"

    def up() -> bool:
        if proc.poll() is not None:
            raise AssertionError(
                f"nginx exited: {proc.stderr.read().decode() if proc.stderr else ''}"
            )
        try:
            urllib.request.urlopen(url, timeout=2).close()
            return True
        except OSError:
            return False

    try:
        wait_until(up, timeout=15, message="nginx")
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)
