"""A self-signed certificate for 127.0.0.1 and localhost, made with openssl for a test."""

from __future__ import annotations

import subprocess
from pathlib import Path


def self_signed_cert(directory: Path) -> tuple[Path, Path]:
    """(certificate, key) in PEM, valid for IP 127.0.0.1 and DNS localhost for two days."""
    cert, key = directory / "tls.crt", directory / "tls.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
         "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    return cert, key
