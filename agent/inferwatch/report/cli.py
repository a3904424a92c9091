"""``inferwatch report``: query a week from Prometheus, render it, write it and/or mail it.

Exit codes (documented in docs/report.md):
0 done; 1 unexpected error; 2 bad flag or configuration (the store answering 401/403
included); 3 Prometheus unreachable (after the retries);
4 a query failed; 5 no data for the period; 6 mail not delivered (nothing sent);
7 the output directory could not be written.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from inferwatch.cli import add_options
from inferwatch.errors import UsageError

if TYPE_CHECKING:
    from collections.abc import Callable

    from inferwatch.report.charts import Chart

EXIT_OUTPUT = 7


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_options(
        parser,
        (
            "--prometheus-url",
            "URL",
            "base URL of a Prometheus-compatible query API "
            "(e.g. http://prometheus:9090); report.prometheus_url in --config",
        ),
    )
    store = parser.add_argument_group(
        "store access",
        "credentials and tenant of an authenticated or multi-tenant store (docs/report.md); "
        "the token and password themselves only from INFERWATCH_PROMETHEUS_BEARER_TOKEN / "
        "INFERWATCH_PROMETHEUS_PASSWORD or a file, never from a flag",
    )
    add_options(
        store,
        (
            "--bearer-token-file",
            "FILE",
            "send the token in FILE as 'Authorization: Bearer' (report.prometheus_bearer_token_file)",
        ),
        (
            "--basic-auth-user",
            "USER",
            "basic auth user; the password from INFERWATCH_PROMETHEUS_PASSWORD or "
            "--basic-auth-password-file (report.prometheus_username)",
        ),
        (
            "--basic-auth-password-file",
            "FILE",
            "basic auth password file (report.prometheus_password_file)",
        ),
        (
            "--tenant",
            "ID",
            "tenant id sent in --tenant-header on every query (report.prometheus_tenant)",
        ),
        (
            "--tenant-header",
            "NAME",
            "header carrying the tenant (default X-Scope-OrgID: Mimir, Cortex; "
            "report.prometheus_tenant_header)",
        ),
    )
    store.add_argument(
        "--retries",
        type=int,
        default=3,
        metavar="N",
        help="tries again N times after an answer 5xx, a time-out or a refused connection, "
        "waiting 0.5 s, 1 s, 2 s ... (default 3)",
    )
    add_options(
        parser,
        (
            "--end",
            "TIME",
            "end of the period: ISO 8601 (2026-11-23, 2026-11-23T06:00:00Z; "
            "UTC unless an offset is given), unix seconds, today (00:00 UTC today, so the "
            "period is whole days) or now (default)",
            "now",
        ),
    )
    parser.add_argument(
        "--days",
        type=int,
        metavar="N",
        help="length of the period in days, compared with the N days before "
        "(default 7; report.days in --config)",
    )
    add_options(
        parser,
        ("--output", "DIR", "write report.html, the charts (PNG), report.txt and daily.csv here"),
    )
    parser.add_argument(
        "--send",
        action="store_true",
        help="mail the report (SMTP settings from --config and INFERWATCH_SMTP_* variables)",
    )
    add_options(
        parser,
        ("--config", "FILE", "inferwatch YAML config file; its report: section is read"),
        (
            "--thresholds",
            "FILE",
            "thresholds.yaml overriding the packaged defaults (report.thresholds_file in --config)",
        ),
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="timeout of each Prometheus query and of the SMTP connection (default 60)",
    )
    parser.add_argument(
        "--quiet", action="store_true", help="no progress display and no summary lines on stderr"
    )


def parse_end(text: str, now: float | None = None) -> float:
    """``now``, ``today`` (00:00 UTC), unix seconds, or ISO 8601 (naive means UTC)."""
    value = text.strip()
    if value.lower() == "now":
        return time.time() if now is None else now
    if value.lower() == "today":
        # Midnight UTC that began today: the period is the last whole days.
        current = time.time() if now is None else now
        return float(int(current // 86400) * 86400)
    try:
        return float(value)
    except ValueError:
        pass
    iso = value[:-1] + "+00:00" if value.endswith(("Z", "z")) else value
    try:
        parsed = dt.datetime.fromisoformat(iso)
    except ValueError:
        raise UsageError(
            f"--end: expected ISO 8601 (2026-11-23 or 2026-11-23T06:00:00Z), unix seconds, "
            f"today or now, got {text!r}"
        ) from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=dt.timezone.utc)
    return parsed.timestamp()


class _Progress:
    """A rich progress bar on stderr when it is a terminal; silent otherwise."""

    def __init__(self, total: int, enabled: bool) -> None:
        self._bar = None
        self._task = None
        if enabled:
            from rich.console import Console
            from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn

            self._bar = Progress(
                SpinnerColumn(),
                TextColumn("{task.description}"),
                BarColumn(),
                TextColumn("{task.completed}/{task.total}"),
                console=Console(stderr=True),
                transient=True,
            )
            self._task = self._bar.add_task("querying Prometheus", total=total)
            self._bar.start()

    def step(self, name: str) -> None:
        if self._bar is not None and self._task is not None:
            self._bar.update(self._task, advance=1, description=f"querying: {name}")

    def phase(self, name: str) -> None:
        if self._bar is not None and self._task is not None:
            self._bar.update(self._task, description=name)

    def stop(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None


def _write_output(
    directory: Path, html_text: str, text: str, csv_text: str, charts: list[Chart]
) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for chart in charts:
        (directory / f"{chart.name}.png").write_bytes(chart.png)
    (directory / "daily.csv").write_text(csv_text, encoding="utf-8")
    (directory / "report.txt").write_text(text, encoding="utf-8")
    # The HTML last: a complete report.html means the files it refers to are there.
    tmp = directory / ".report.html.tmp"
    tmp.write_text(html_text, encoding="utf-8")
    tmp.replace(directory / "report.html")


def _unique_names(charts: list[Chart]) -> list[Chart]:
    from dataclasses import replace

    seen: set[str] = set()
    out = []
    for chart in charts:
        name = chart.name
        n = 2
        while name in seen:
            name = f"{chart.name}-{n}"
            n += 1
        seen.add(name)
        out.append(replace(chart, name=name))
    return out


def main(args: argparse.Namespace) -> int:
    from inferwatch.pack.thresholds import load_thresholds
    from inferwatch.report import budget as budget_mod
    from inferwatch.report import charts as charts_mod
    from inferwatch.report import render, words
    from inferwatch.report.build import build_report
    from inferwatch.report.cost import collect_cost, cost_section
    from inferwatch.report.insights import loops_by_model
    from inferwatch.report.mail import build_message, content_id, send
    from inferwatch.report.model import Period
    from inferwatch.report.promapi import PrometheusClient, ReportError
    from inferwatch.report.query import collect, count_steps
    from inferwatch.report.settings import load_settings, store_access
    from inferwatch.report.whatif import collect_whatif

    settings = load_settings(args.config, os.environ)
    url = args.prometheus_url or settings.prometheus_url
    if not url:
        raise UsageError("--prometheus-url is required (or report.prometheus_url in --config)")
    if not url.startswith(("http://", "https://")):
        raise UsageError(f"--prometheus-url: expected an http:// or https:// URL, got {url!r}")
    if "@" in url.split("://", 1)[1].split("/", 1)[0]:
        # user:password@host would sit in the process list and in the report's footer
        raise UsageError(
            "--prometheus-url: credentials in the URL are not accepted; use --basic-auth-user "
            "with INFERWATCH_PROMETHEUS_PASSWORD (or a password file) instead"
        )
    if not 0 <= args.retries <= 10:
        raise UsageError(f"--retries: expected 0 to 10, got {args.retries}")
    access = store_access(
        settings,
        os.environ,
        {
            "bearer_token_file": args.bearer_token_file,
            "username": args.basic_auth_user,
            "password_file": args.basic_auth_password_file,
            "tenant": args.tenant,
            "tenant_header": args.tenant_header,
        },
    )
    days = args.days if args.days is not None else (settings.days or 7)
    if not 1 <= days <= 366:
        raise UsageError(f"--days: expected 1 to 366, got {days}")
    if args.timeout <= 0:
        raise UsageError(f"--timeout: expected a positive number of seconds, got {args.timeout}")
    end = parse_end(args.end)
    if args.send:
        settings.smtp.check_complete()  # before any query: a config mistake fails fast
    thresholds = load_thresholds(args.thresholds or settings.thresholds_file)

    say = (
        (lambda msg: None)
        if args.quiet
        else (lambda msg: print(f"inferwatch report: {msg}", file=sys.stderr))
    )
    period = Period(end=end, days=days)
    client = PrometheusClient(url, timeout=args.timeout, access=access, retries=args.retries)
    progress = _Progress(count_steps(), enabled=not args.quiet and sys.stderr.isatty())
    try:
        try:
            raw = collect(client, period, thresholds, progress=progress.step)
            raw_cost = collect_cost(client, period, thresholds)
            whatif = collect_whatif(client, period)
            progress.phase("drawing charts")
            report = build_report(raw, thresholds)
            # the wasters' loops are the findings' (pack.loops), never a rule of its own
            cost = cost_section(raw_cost, period, thresholds, loops_by_model(report.findings))
            budgets = budget_mod.budgets(raw, thresholds)
            charts = _unique_names(charts_mod.all_charts(report))
        finally:
            progress.stop()
    except ReportError as err:
        print(f"inferwatch report: error: {err}", file=sys.stderr)
        return err.exit_code
    retried = f" ({client.retried} tried again)" if client.retried else ""
    say(
        f"{client.queries} queries{retried} to {url} for {words.timestamp(period.start)} .. "
        f"{words.timestamp(period.end)}"
    )

    text = render.text(report, cost, budgets, whatif)
    csv_text = render.csv_text(report, cost)

    def page(image_src: Callable[[Chart], str]) -> str:
        return render.html(
            report, charts, image_src, source=url, cost=cost, budgets=budgets, whatif=whatif
        )

    if args.output:
        directory = Path(args.output)
        try:
            _write_output(directory, page(lambda c: f"{c.name}.png"), text, csv_text, charts)
        except OSError as err:
            print(
                f"inferwatch report: error: cannot write the report to {directory}: "
                f"{err.strerror or err}",
                file=sys.stderr,
            )
            return EXIT_OUTPUT
        say(f"wrote {directory / 'report.html'} ({len(charts)} charts, daily.csv, report.txt)")
    if args.send:
        smtp = settings.smtp
        assert smtp.sender is not None
        message = build_message(
            subject=render.title(report),
            sender=smtp.sender,
            to=smtp.to,
            text=text,
            html=page(lambda c: f"cid:{content_id(c)}"),
            charts=charts,
            csv_name=render.csv_name(report),
            csv_text=csv_text,
        )
        try:
            send(message, smtp, timeout=args.timeout)
        except ReportError as err:
            print(f"inferwatch report: error: {err}", file=sys.stderr)
            return err.exit_code
        say(f"mailed to {', '.join(smtp.to)} via {smtp.host}:{smtp.effective_port}")
    if not args.output and not args.send:
        sys.stdout.write(text)
    return 0
