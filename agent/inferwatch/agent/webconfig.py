"""TLS and basic auth for /metrics, in the Prometheus exporter-toolkit file format.

The same file node_exporter and friends read (``--web.config.file``), so users
reuse what they know::

    tls_server_config:
      cert_file: /etc/inferwatch/tls.crt
      key_file: /etc/inferwatch/tls.key
      client_ca_file: /etc/inferwatch/ca.crt       # optional: mutual TLS
      client_auth_type: RequireAndVerifyClientCert # optional
      min_version: TLS12                            # optional: TLS10..TLS13
    basic_auth_users:
      prometheus: $2y$10$...                        # bcrypt hash (htpasswd -nBC 10)
    http_server_config:
      headers: {X-Frame-Options: deny}              # optional extra response headers

Passwords are never stored in plain text; a successful check is remembered by
a keyed digest (a bounded, least-recently-used set) so that 50 scrapers do not
each pay bcrypt's cost. bcrypt itself runs on a thread of its own, off the
event loop (see ``exporter.py``), one check at a time.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import re
import ssl
import stat
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from inferwatch.errors import ConfigError
from inferwatch.validate import read_yaml_file

_CLIENT_AUTH = {
    "NoClientCert": ssl.CERT_NONE,
    "RequestClientCert": ssl.CERT_OPTIONAL,
    "RequireAnyClientCert": ssl.CERT_REQUIRED,
    "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
    "RequireAndVerifyClientCert": ssl.CERT_REQUIRED,
}
_TLS_VERSIONS = {
    "TLS10": ssl.TLSVersion.TLSv1,
    "TLS11": ssl.TLSVersion.TLSv1_1,
    "TLS12": ssl.TLSVersion.TLSv1_2,
    "TLS13": ssl.TLSVersion.TLSv1_3,
}
_TLS_KEYS = (
    "cert_file",
    "key_file",
    "client_ca_file",
    "client_auth_type",
    "min_version",
    "max_version",
)
# A valid bcrypt hash (cost 10) to check unknown users against, so that timing does
# not reveal which user names exist.
_DUMMY_HASH = b"$2b$10$8tE0yYAYjTq3XX2mJaOxRe8qtJvvWvP1h1IUsR5Tr3aSRwbWC2Lu."
#: modular crypt format of bcrypt: variant, two-digit cost 04..31, 53 characters of
#: salt and digest in bcrypt's base-64 alphabet
_BCRYPT = re.compile(r"\$2[aby]\$(0[4-9]|[12][0-9]|3[01])\$[./A-Za-z0-9]{53}")
#: verified credentials remembered (keyed digests); the oldest is forgotten first
GOOD_CACHE_SIZE = 256
#: client_auth_type values that need client_ca_file: Python's TLS cannot accept a
#: client certificate without verifying it against a CA
_NEEDS_CA = ("RequireAnyClientCert", "VerifyClientCertIfGiven", "RequireAndVerifyClientCert")

log = logging.getLogger(__name__)
_WARNED: set[str] = set()


@dataclass(frozen=True)
class WebConfig:
    ssl_context: ssl.SSLContext | None = None
    users: Mapping[str, bytes] = field(default_factory=dict)
    headers: Mapping[str, str] = field(default_factory=dict)


class BasicAuth:
    """Checks ``Authorization: Basic`` credentials against bcrypt hashes."""

    def __init__(self, users: Mapping[str, bytes]) -> None:
        # bcrypt is needed only when basic auth is configured
        import bcrypt

        self._checkpw = bcrypt.checkpw
        self.users = dict(users)
        self._key = os.urandom(32)
        self._good: OrderedDict[bytes, None] = OrderedDict()

    def digest(self, user: str, password: str) -> bytes:
        return hmac.new(self._key, f"{user}\0{password}".encode(), hashlib.sha256).digest()

    def cached(self, user: str, password: str) -> bool:
        """True when these credentials were verified before (cheap: no bcrypt)."""
        digest = self.digest(user, password)
        if digest in self._good:
            self._good.move_to_end(digest)
            return True
        return False

    def check(self, user: str, password: str) -> bool:
        """The full check (bcrypt: tens of milliseconds); call it off the event loop."""
        if self.cached(user, password):
            return True
        hashed = self.users.get(user)
        ok = self._checkpw(password.encode(), hashed or _DUMMY_HASH) and hashed is not None
        if ok:
            self._good[self.digest(user, password)] = None
            while len(self._good) > GOOD_CACHE_SIZE:
                self._good.popitem(last=False)
        return ok


def load_web_config(path: str) -> WebConfig:
    """Read and validate the file; every problem is a ConfigError naming the key."""
    raw = read_yaml_file(path)
    for key in raw:
        if key not in ("tls_server_config", "basic_auth_users", "http_server_config"):
            raise ConfigError(
                path, str(key), "one of tls_server_config, basic_auth_users, http_server_config"
            )
    context = _tls(raw.get("tls_server_config"), path)
    users: dict[str, bytes] = {}
    for user, hashed in (_mapping(raw.get("basic_auth_users"), path, "basic_auth_users")).items():
        key = f"basic_auth_users.{str(user)[:64]}"
        if not isinstance(hashed, str) or not _BCRYPT.fullmatch(hashed):
            raise ConfigError(path, key, "a bcrypt hash such as $2y$10$... (htpasswd -nBC 10)")
        users[str(user)] = hashed.encode()
    headers: dict[str, str] = {}
    http = _mapping(raw.get("http_server_config"), path, "http_server_config")
    for key, value in http.items():
        if key != "headers":
            raise ConfigError(path, f"http_server_config.{key}", "only the key headers")
        for name, hv in _mapping(value, path, "http_server_config.headers").items():
            headers[str(name)] = str(hv)
    if users:
        _warn_if_readable(path)
    return WebConfig(context, users, headers)


def _warn_if_readable(path: str) -> None:
    """Password hashes can be attacked offline: say so when anyone may read them."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return
    if mode & stat.S_IROTH and path not in _WARNED:
        _WARNED.add(path)  # once, though the file is read at validation and at start
        log.warning(
            "%s holds password hashes and is readable by every user; chmod o-r it (0640 or 0600)",
            path,
        )


def _mapping(value: Any, path: str, key: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        # never the value itself: it may be a password or a private key path
        raise ConfigError(path, key, "a mapping", f"a {type(value).__name__}")
    return value


def _tls(raw: Any, path: str) -> ssl.SSLContext | None:
    tls = _mapping(raw, path, "tls_server_config")
    if not tls:
        return None
    for key in tls:
        if key not in _TLS_KEYS:
            raise ConfigError(path, f"tls_server_config.{key}", "one of " + ", ".join(_TLS_KEYS))
    for key in ("cert_file", "key_file"):
        if not isinstance(tls.get(key), str):
            raise ConfigError(path, f"tls_server_config.{key}", "a file path (required for TLS)")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(tls["cert_file"], tls["key_file"])
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(
            path,
            "tls_server_config.cert_file",
            "a readable certificate and matching key in PEM format",
            str(exc),
        ) from None
    auth = tls.get("client_auth_type", "NoClientCert")
    if not isinstance(auth, str) or auth not in _CLIENT_AUTH:
        raise ConfigError(
            path, "tls_server_config.client_auth_type", "one of " + ", ".join(_CLIENT_AUTH)
        )
    context.verify_mode = _CLIENT_AUTH[auth]
    if "client_ca_file" in tls:
        try:
            context.load_verify_locations(cafile=tls["client_ca_file"])
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(
                path, "tls_server_config.client_ca_file", "a readable CA file", str(exc)
            ) from None
    elif auth in _NEEDS_CA:
        raise ConfigError(
            path,
            "tls_server_config.client_ca_file",
            f"a CA file when client_auth_type is {auth} (without one every client is refused)",
        )
    for key, attr in (("min_version", "minimum_version"), ("max_version", "maximum_version")):
        if key in tls:
            if not isinstance(tls[key], str) or tls[key] not in _TLS_VERSIONS:
                raise ConfigError(
                    path, f"tls_server_config.{key}", "one of " + ", ".join(_TLS_VERSIONS)
                )
            setattr(context, attr, _TLS_VERSIONS[tls[key]])
    if "min_version" not in tls:
        context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context
