"""A webhook receiver for Alertmanager: an HTTP server in a thread that records every POST.

Alertmanager's webhook payload (version 4) carries a group of alerts, each with
its own ``status`` (``firing`` or ``resolved``), labels, annotations,
``startsAt``/``endsAt`` and ``fingerprint``. The receiver keeps each POST as a
:class:`Notification` with the wall-clock time it arrived and flattens the
alerts into :class:`AlertEvent` records, so a test can ask "did
InferenceWorkerDown for worker w-down arrive firing, and later resolved?"
without caring how Alertmanager grouped them::

    with WebhookReceiver() as hook:
        ...  # point Alertmanager's webhook_configs at hook.url + "/page"
        event = wait_until(lambda: hook.first("InferenceWorkerDown", "firing", {"worker": "w"}))
        assert event.path == "/page"
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def parse_time(text: str) -> float:
    """Unix time of an RFC 3339 timestamp as Alertmanager writes it (nanoseconds allowed)."""
    text = text.replace("Z", "+00:00")
    head, sep, rest = text.partition(".")
    if sep:
        # Python's fromisoformat before 3.11 takes at most 6 fractional digits
        digits = "".join(c for c in rest if c.isdigit())
        zone = rest[len(digits) :]
        text = f"{head}.{digits[:6].ljust(6, '0')}{zone}"
    return datetime.fromisoformat(text).timestamp()


@dataclass(frozen=True)
class Notification:
    """One POST from Alertmanager."""

    received: float  # time.time() when the request arrived
    path: str  # the URL path, e.g. /page or /ticket (the receiver it was routed to)
    payload: dict[str, Any]


@dataclass(frozen=True)
class AlertEvent:
    """One alert inside a notification."""

    received: float
    path: str
    receiver: str  # the Alertmanager receiver name from the payload
    status: str  # "firing" or "resolved"
    labels: dict[str, str]
    annotations: dict[str, str]
    starts_at: float  # unix time; for Prometheus alerts: when the alert started firing
    ends_at: float | None  # unix time when resolved, None while firing
    fingerprint: str

    @property
    def alertname(self) -> str:
        return self.labels.get("alertname", "")

    def matches(self, alertname: str | None, status: str | None, labels: Mapping[str, str]) -> bool:
        if alertname is not None and self.alertname != alertname:
            return False
        if status is not None and self.status != status:
            return False
        return all(self.labels.get(k) == v for k, v in labels.items())


def _events(note: Notification) -> list[AlertEvent]:
    out = []
    for alert in note.payload.get("alerts") or []:
        ends = alert.get("endsAt") or ""
        status = str(alert.get("status", ""))
        out.append(
            AlertEvent(
                received=note.received,
                path=note.path,
                receiver=str(note.payload.get("receiver", "")),
                status=status,
                labels=dict(alert.get("labels") or {}),
                annotations=dict(alert.get("annotations") or {}),
                starts_at=parse_time(alert["startsAt"]),
                # a firing alert's endsAt is Alertmanager's zero time (year 1)
                ends_at=parse_time(ends) if status == "resolved" and ends else None,
                fingerprint=str(alert.get("fingerprint", "")),
            )
        )
    return out


class WebhookReceiver:
    """An HTTP server on 127.0.0.1 (any free port) recording Alertmanager's POSTs."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._notes: list[Notification] = []
        self._errors: list[str] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                received = time.time()
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                try:
                    payload = json.loads(body)
                    if not isinstance(payload, dict):
                        raise ValueError("not a JSON object")
                except ValueError as exc:
                    receiver._record_error(f"{self.path}: {exc}: {body[:200]!r}")
                    self.send_response(400)
                    self.end_headers()
                    return
                receiver._record(Notification(received, self.path, payload))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass  # quiet: the test reads the records, not a log

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = int(self._server.server_address[1])
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="webhook", daemon=True
        )
        self._thread.start()

    def _record(self, note: Notification) -> None:
        with self._lock:
            self._notes.append(note)

    def _record_error(self, text: str) -> None:
        with self._lock:
            self._errors.append(text)

    # ------------------------------------------------------------------ queries
    def notifications(self) -> list[Notification]:
        with self._lock:
            return list(self._notes)

    @property
    def errors(self) -> list[str]:
        """Bodies that were not an Alertmanager JSON payload."""
        with self._lock:
            return list(self._errors)

    def events(
        self,
        alertname: str | None = None,
        status: str | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> list[AlertEvent]:
        """Every alert received, in arrival order, filtered by name, status and labels."""
        return [
            e
            for note in self.notifications()
            for e in _events(note)
            if e.matches(alertname, status, labels or {})
        ]

    def first(
        self,
        alertname: str,
        status: str,
        labels: Mapping[str, str] | None = None,
        *,
        after: float = 0.0,
        started_after: float = 0.0,
    ) -> AlertEvent | None:
        """The first matching event received at or after ``after`` (unix time), or None.

        ``started_after`` keeps only alerts whose ``startsAt`` is at or after it:
        Alertmanager re-sends every alert of a group when one of them changes,
        so an alert that fired earlier can arrive again, with its old startsAt.
        """
        for e in self.events(alertname, status, labels):
            if e.received >= after and e.starts_at >= started_after:
                return e
        return None

    def resolution(self, firing: AlertEvent) -> AlertEvent | None:
        """The resolved notification of the same alert and firing episode (same startsAt)."""
        for e in self.events(firing.alertname, "resolved"):
            if e.fingerprint == firing.fingerprint and abs(e.starts_at - firing.starts_at) < 1e-3:
                return e
        return None

    # ------------------------------------------------------------------ lifecycle
    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)

    def __enter__(self) -> WebhookReceiver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
