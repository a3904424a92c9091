"""The agent's log lines: text (the default), logfmt or JSON, as exporters write them."""

from __future__ import annotations

import json
import logging
import time


def _timestamp(record: logging.LogRecord) -> str:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
    return f"{stamp}.{int(record.msecs):03d}Z"


def _logfmt_value(value: str) -> str:
    if value and not any(c in value for c in ' "=\\') and value.isprintable():
        return value
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


class LogfmtFormatter(logging.Formatter):
    """``ts=... level=info logger=inferwatch msg="..."``: one line per record."""

    def format(self, record: logging.LogRecord) -> str:
        msg = record.getMessage()
        if record.exc_info:
            msg += " " + self.formatException(record.exc_info).replace("\n", " | ")
        pairs = {
            "ts": _timestamp(record),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": msg,
        }
        return " ".join(f"{k}={_logfmt_value(v)}" for k, v in pairs.items())


class JsonFormatter(logging.Formatter):
    """One JSON object per line with ts, level, logger and msg."""

    def format(self, record: logging.LogRecord) -> str:
        doc = {
            "ts": _timestamp(record),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if record.exc_info:
            doc["exception"] = self.formatException(record.exc_info)
        return json.dumps(doc, ensure_ascii=False)


def setup_logging(level: str, fmt: str = "text") -> None:
    handler = logging.StreamHandler()
    if fmt == "logfmt":
        handler.setFormatter(LogfmtFormatter())
    elif fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(getattr(logging, level.upper()))
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
