"""The report's settings: the ``report:`` section of the config file, ``INFERWATCH_SMTP_*``
and ``INFERWATCH_PROMETHEUS_*``.

Precedence is flags > environment > file > defaults. The SMTP password comes
only from ``INFERWATCH_SMTP_PASSWORD`` or a password file, never from a flag,
and is kept out of every repr, log line and error message. The same holds for
the store's bearer token and password (``INFERWATCH_PROMETHEUS_BEARER_TOKEN``,
``INFERWATCH_PROMETHEUS_PASSWORD`` or a file); flags name only files.

```yaml
report:
  prometheus_url: http://prometheus:9090
  # a store behind authentication (one of the two), and its tenant
  prometheus_bearer_token_file: /run/secrets/store-token
  prometheus_username: reports
  prometheus_password_file: /run/secrets/store-password
  prometheus_tenant: team-a               # sent as X-Scope-OrgID (Mimir, Cortex)
  prometheus_tenant_header: X-Scope-OrgID
  days: 7
  thresholds_file: /etc/inferwatch/thresholds.yaml
  smtp:
    host: smtp.example.com
    port: 587
    security: starttls        # starttls | tls | none
    username: reports
    password_file: /run/secrets/smtp-password
    from: "inferwatch <reports@example.com>"
    to: [sre@example.com]
```
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from inferwatch import validate
from inferwatch.errors import ConfigError
from inferwatch.report.promapi import DEFAULT_TENANT_HEADER, StoreAccess

SECURITY = ("starttls", "tls", "none")
DEFAULT_PORTS = {"starttls": 587, "tls": 465, "none": 25}
#: the store's access settings: config key suffix -> environment variable suffix
STORE_KEYS = {
    "bearer_token_file": "BEARER_TOKEN_FILE",
    "username": "USERNAME",
    "password_file": "PASSWORD_FILE",
    "tenant": "TENANT",
    "tenant_header": "TENANT_HEADER",
}
REPORT_KEYS = (
    "prometheus_url",
    *(f"prometheus_{k}" for k in STORE_KEYS),
    "days",
    "smtp",
    "thresholds_file",
)
#: a mail setting from the environment: INFERWATCH_SMTP_<KEY> (and INFERWATCH_SMTP_PASSWORD)
ENV_PREFIX = "INFERWATCH_SMTP_"
STORE_ENV_PREFIX = "INFERWATCH_PROMETHEUS_"
_HEADER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9-]*$")


@dataclass(frozen=True)
class SmtpSettings:
    host: str | None = None
    port: int | None = None
    security: str = "starttls"
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    sender: str | None = None
    to: tuple[str, ...] = ()

    @property
    def effective_port(self) -> int:
        return self.port or DEFAULT_PORTS[self.security]

    def check_complete(self) -> None:
        """Raise ConfigError for what --send needs and is missing."""
        missing = [
            (key, env)
            for key, env, value in (
                ("host", "HOST", self.host),
                ("from", "FROM", self.sender),
                ("to", "TO", self.to),
            )
            if not value
        ]
        if missing:
            key, env = missing[0]
            raise ConfigError(
                "mail settings",
                f"report.smtp.{key}",
                f"a value for --send (set it in the config file or {ENV_PREFIX}{env})",
            )


@dataclass(frozen=True)
class StoreSettings:
    """Where each access setting came from: (value, source, key) from the file or environment."""

    values: dict[str, tuple[str, str, str]] = field(default_factory=dict)


@dataclass(frozen=True)
class ReportSettings:
    prometheus_url: str | None = None
    days: int | None = None
    thresholds_file: str | None = None
    smtp: SmtpSettings = field(default_factory=SmtpSettings)
    store: StoreSettings = field(default_factory=StoreSettings)


def _str(value: Any, source: str, key: str) -> str:
    return validate.string(value, source, key).strip()


_security = validate.choice(*SECURITY)


def _addresses(value: Any, source: str, key: str) -> tuple[str, ...]:
    if isinstance(value, str):
        items = [v.strip() for v in value.split(",")]
    elif isinstance(value, list):
        items = value
    else:
        raise ConfigError(source, key, "a list of mail addresses", got=type(value).__name__)
    out = []
    for item in items:
        if not isinstance(item, str) or "@" not in item:
            raise ConfigError(source, key, "a list of mail addresses", got=item)
        out.append(item.strip())
    if not out:
        raise ConfigError(source, key, "at least one mail address")
    return tuple(out)


def _address(value: Any, source: str, key: str) -> str:
    text = _str(value, source, key)
    if "@" not in text:
        raise ConfigError(source, key, "a mail address", got=text)
    return text


def _port(value: Any, source: str, key: str) -> int:
    return validate.count(value, source, key, 1, 65535)


#: the SMTP keys that hold a value (password_file names a file): the field each sets, its parser
_SMTP_FIELDS: dict[str, tuple[str, validate.Parser]] = {
    "host": ("host", _str),
    "port": ("port", _port),
    "security": ("security", _security),
    "username": ("username", _str),
    "from": ("sender", _address),
    "to": ("to", _addresses),
}
#: every key report.smtp takes (each also INFERWATCH_SMTP_<KEY>), in the order its error
#: lists them: the fields above and password_file, read apart (it names the file whose text
#: is the password)
SMTP_KEYS = (*_SMTP_FIELDS, "password_file")


def _read_password(source: str, key: str, path: str) -> str:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as err:
        raise ConfigError(
            source, key, "a readable password file", got=f"{path} ({err.strerror or err})"
        ) from None
    password = text.rstrip("\r\n")
    if not password:
        raise ConfigError(source, key, "a password file that is not empty", got=path)
    return password


def _load_file(path: str) -> dict[str, Any]:
    """The ``report:`` section of the configuration file ({} when it has none)."""
    section = validate.read_yaml_file(path).get("report", {})
    if section is None:
        return {}
    if not isinstance(section, dict):
        raise ConfigError(path, "report", "a mapping", got=type(section).__name__)
    return section


def _user_and_password(
    source: str,
    username: str | None,
    password: str | None,
    user: tuple[str, str],
    secret: tuple[str, str],
) -> None:
    """Basic auth needs both halves: ``user`` and ``secret`` are (key, where else to set it)."""
    if password is not None and username is None:
        raise ConfigError(source, user[0], f"a user name when a password is set ({user[1]})")
    if username is not None and password is None:
        raise ConfigError(source, secret[0], f"a password for user {username!r}: {secret[1]}")


def load_settings(config_file: str | None, env: Mapping[str, str]) -> ReportSettings:
    """Settings from the ``report:`` section of ``config_file`` and the environment."""
    section = _load_file(config_file) if config_file else {}
    source = config_file or ""
    for key in section:
        if key not in REPORT_KEYS:
            raise ConfigError(source, f"report.{key}", "one of " + ", ".join(REPORT_KEYS), got=key)
    prometheus_url = days = thresholds_file = None
    if section.get("prometheus_url") is not None:
        prometheus_url = _str(section["prometheus_url"], source, "report.prometheus_url")
    if section.get("days") is not None:
        days = validate.count(section["days"], source, "report.days", 1, 366)
    if section.get("thresholds_file") is not None:
        thresholds_file = _str(section["thresholds_file"], source, "report.thresholds_file")

    store: dict[str, tuple[str, str, str]] = {}
    for key, suffix in STORE_KEYS.items():
        if section.get(f"prometheus_{key}") is not None:
            text = _str(section[f"prometheus_{key}"], source, f"report.prometheus_{key}")
            store[key] = (text, source, f"report.prometheus_{key}")
        if env.get(STORE_ENV_PREFIX + suffix):
            store[key] = (env[STORE_ENV_PREFIX + suffix], "environment", STORE_ENV_PREFIX + suffix)

    smtp_section = section.get("smtp") or {}
    if not isinstance(smtp_section, dict):
        raise ConfigError(source, "report.smtp", "a mapping", got=type(smtp_section).__name__)
    for key in smtp_section:
        if key not in SMTP_KEYS:
            hint = (
                " (the password goes in password_file or INFERWATCH_SMTP_PASSWORD)"
                if key == "password"
                else ""
            )
            raise ConfigError(
                source, f"report.smtp.{key}", "one of " + ", ".join(SMTP_KEYS) + hint, got=key
            )

    # each setting as (value, where it came from, its key there), as for the store above
    smtp: dict[str, tuple[Any, str, str]] = {}
    for key in SMTP_KEYS:
        name = ENV_PREFIX + key.upper()
        if env.get(name):
            smtp[key] = (env[name], "environment", name)
        elif smtp_section.get(key) is not None:
            smtp[key] = (smtp_section[key], source, f"report.smtp.{key}")

    fields: dict[str, Any] = {
        name: parse(*smtp[key]) for key, (name, parse) in _SMTP_FIELDS.items() if key in smtp
    }
    password: str | None = None
    if env.get(ENV_PREFIX + "PASSWORD"):
        password = env[ENV_PREFIX + "PASSWORD"]
    elif "password_file" in smtp:
        _, origin, key = smtp["password_file"]
        password = _read_password(origin, key, _str(*smtp["password_file"]))
    _user_and_password(
        "mail settings",
        fields.get("username"),
        password,
        ("report.smtp.username", f"or {ENV_PREFIX}USERNAME"),
        (
            "report.smtp.password_file",
            f"{ENV_PREFIX}PASSWORD, {ENV_PREFIX}PASSWORD_FILE or report.smtp.password_file",
        ),
    )
    return ReportSettings(
        prometheus_url=prometheus_url,
        days=days,
        thresholds_file=thresholds_file,
        smtp=SmtpSettings(**fields, password=password),
        store=StoreSettings(store),
    )


def _read_secret(source: str, key: str, path: str, what: str) -> str:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as err:
        raise ConfigError(
            source, key, f"a readable {what} file", got=f"{path} ({err.strerror or err})"
        ) from None
    secret = text.strip()
    if not secret:
        raise ConfigError(source, key, f"a {what} file that is not empty", got=path)
    if "\n" in secret or "\r" in secret:
        raise ConfigError(source, key, f"a {what} file of one line", got=path)
    return secret


def store_access(
    settings: ReportSettings,
    env: Mapping[str, str],
    flags: Mapping[str, str | None],
) -> StoreAccess:
    """The store's credentials and tenant: flags (file paths, user, tenant) > environment > file.

    ``flags`` maps the keys of :data:`STORE_KEYS` to what the command line gave
    (None where it gave nothing). The token and the password themselves come
    only from ``INFERWATCH_PROMETHEUS_BEARER_TOKEN`` / ``..._PASSWORD`` or from a
    file, so that they never show in a process list.
    """
    chosen = dict(settings.store.values)
    for key, value in flags.items():
        if value is not None:
            chosen[key] = (value, "command line", "--" + _FLAG[key])

    def get(key: str) -> str | None:
        return chosen[key][0] if key in chosen else None

    token = env.get(STORE_ENV_PREFIX + "BEARER_TOKEN") or None
    token_from = ("environment", STORE_ENV_PREFIX + "BEARER_TOKEN")
    if token is None and get("bearer_token_file"):
        value, source, key = chosen["bearer_token_file"]
        token = _read_secret(source, key, value, "bearer token")
        token_from = (source, key)
    password = env.get(STORE_ENV_PREFIX + "PASSWORD") or None
    if password is None and get("password_file"):
        value, source, key = chosen["password_file"]
        password = _read_secret(source, key, value, "password")
    username = get("username")
    if token is not None and (username is not None or password is not None):
        raise ConfigError(
            token_from[0],
            token_from[1],
            "either a bearer token or basic auth (user and password), not both",
        )
    _user_and_password(
        "store settings",
        username,
        password,
        ("report.prometheus_username", f"--basic-auth-user or {STORE_ENV_PREFIX}USERNAME"),
        (
            "report.prometheus_password_file",
            f"{STORE_ENV_PREFIX}PASSWORD, --basic-auth-password-file or "
            "report.prometheus_password_file",
        ),
    )
    header = get("tenant_header") or DEFAULT_TENANT_HEADER
    if not _HEADER_NAME.match(header):
        value, source, key = chosen["tenant_header"]
        raise ConfigError(source, key, "an HTTP header name (letters, digits, -)", got=value)
    tenant = get("tenant")
    if tenant is not None and not tenant.isprintable():
        _, source, key = chosen["tenant"]
        raise ConfigError(source, key, "a tenant id of printable characters")
    return StoreAccess(
        bearer_token=token,
        username=username,
        password=password,
        tenant=tenant,
        tenant_header=header,
    )


#: the command-line flag of each access setting
_FLAG = {
    "bearer_token_file": "bearer-token-file",
    "username": "basic-auth-user",
    "password_file": "basic-auth-password-file",
    "tenant": "tenant",
    "tenant_header": "tenant-header",
}
