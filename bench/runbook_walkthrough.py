"""On-call walkthrough of the overload scenario, from the page to the action (docs/e2e.md).

Starts ``inferwatch demo --stack --scenario overload`` (simulated workers, the agent, a
real Prometheus and Alertmanager with the generated rules), waits for
InferenceQueueOverCapacity in Alertmanager's API, takes the alert's runbook_url as
Alertmanager holds it (Prometheus filled in the labels), rewrites its base (the demo
links this checkout's runbooks/ as file://) to the shipped nginx runbook site on a
loopback port, and opens it in headless Chromium at 1280x800. Prints the figures:
seconds from the demo's start to the alert in Alertmanager, clicks from the
notification to the action, words before the action and in the Do this now block,
whether the action and the advise line are on the first screen; runs the advise line
the page shows against the demo's agent, then ``advise --prometheus-url`` on the
Prometheus the link names (ranked by the alerts firing there), and prints each one's
first item and the words of its output up to that item's title and first action.
Writes the screenshots with --shots DIR.
Asserts nothing.

    PYTHONPATH=agent:. python bench/runbook_walkthrough.py --shots docs/img
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

from tests.support.browser import Devtools
from tests.support.proc import REPO, free_port
from tests.support.runbook_site import runbook_site

ALERT = "InferenceQueueOverCapacity"
#: reading speed for the reading-time figure (words per minute, a common figure for
#: technical text read for action)
WPM = 200


def _get(url: str) -> object:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return json.loads(resp.read())


def _small_png(path: Path) -> None:
    """Palette PNG (64 colours): a page of text stays legible at a fraction of the size."""
    try:
        from PIL import Image
    except ImportError:
        return
    image = Image.open(path).convert("RGB")
    image.quantize(colors=64).save(path, optimize=True)


def _first_item(out: str) -> None:
    """advise's first item, and the words of its output up to it (and its first action)."""
    lines = out.splitlines()
    title = next((i for i, ln in enumerate(lines) if ln.startswith("1. ")), None)
    do = next((i for i, ln in enumerate(lines) if ln.strip() == "do:"), None)
    if title is None or do is None:
        return
    to_title = len(" ".join(lines[: title + 1]).split())
    to_action = len(" ".join(lines[: do + 2]).split())
    print(
        f"advise's first item: {lines[title][3:]}\n"
        f"  its first action: {lines[do + 1].strip()[2:]}\n"
        f"  words of advise's output to the item's title: {to_title} "
        f"({to_title / WPM * 60:.0f} s), to its first action: {to_action} "
        f"({to_action / WPM * 60:.0f} s)"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shots", type=Path, help="write the screenshots here")
    ap.add_argument("--timeout", type=float, default=300, help="seconds to wait for the page")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="runbook-walk-"))
    port = free_port()
    started = time.monotonic()
    demo = subprocess.Popen(
        [sys.executable, "-m", "inferwatch.cli", "demo", "--stack", "--scenario", "overload",
         "--no-live", "--listen", f"127.0.0.1:{port}", "--duration", str(int(args.timeout) + 60)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO,
    )  # fmt: skip
    try:
        am = None
        assert demo.stdout is not None
        for line in demo.stdout:
            m = re.match(r"alertmanager\s+(http://\S+)", line.strip())
            if m:
                am = m.group(1)
                break
        # keep reading the demo's status lines, so its pipe never fills
        threading.Thread(target=lambda: [None for _ in demo.stdout or ()], daemon=True).start()
        if am is None:
            print("the demo printed no Alertmanager address", file=sys.stderr)
            return 1
        fired = None
        while time.monotonic() - started < args.timeout:
            alerts = _get(am + "/api/v2/alerts?active=true")
            assert isinstance(alerts, list)
            fired = next((a for a in alerts if a["labels"].get("alertname") == ALERT), None)
            if fired:
                break
            time.sleep(1)
        if fired is None:
            print(f"{ALERT} did not reach Alertmanager in {args.timeout:.0f}s", file=sys.stderr)
            return 1
        to_page = time.monotonic() - started
        url = fired["annotations"]["runbook_url"]
        print(f"alert in Alertmanager after {to_page:.0f}s: {ALERT} {fired['labels']}")
        print(f"runbook_url (Alertmanager): {url}")
        with runbook_site(work) as site:
            base = (REPO / "runbooks").as_uri() + "/"
            opened = site + url.removeprefix(base)
            print(f"opened on the runbook site: {opened}")
            browser = Devtools(work / "profile", size=(1280, 800))
            try:
                browser.open(opened)
                errors = browser.console_errors()
                now = str(browser.eval("document.getElementById('do-this-now').innerText"))
                before = str(
                    browser.eval(
                        "(() => { const r = document.createRange();"
                        " r.setStartBefore(document.querySelector('main'));"
                        " r.setEndBefore(document.getElementById('do-this-now'));"
                        " return r.toString(); })()"
                    )
                )
                bottom = browser.eval(
                    "document.getElementById('do-this-now').getBoundingClientRect().bottom"
                )
                advise = str(
                    browser.eval(
                        "document.querySelector('#do-this-now code.language-sh').textContent"
                    )
                ).strip()
                action = now.split("Then the agent's advice")[0]
                words_action = len(action.split()) - 3  # less the heading "Do this now"
                print(f"console errors: {len(errors)}")
                print("clicks from the notification to the action: 1 (the runbook link)")
                print(f"words above the action block: {len(before.split())}")
                print(
                    f"words of the action: {words_action} "
                    f"({words_action / WPM * 60:.0f} s at {WPM} words a minute)"
                )
                print(f"action block ends at {bottom:.0f} px of an 800 px first screen")
                print(f"advise line on the page: {advise}")
                if args.shots:
                    first = args.shots / "runbook-overload-first-screen.png"
                    browser.screenshot(first)
                    browser.eval(
                        "[...document.querySelectorAll('h2')]"
                        ".find(h => h.textContent === 'Diagnosis').scrollIntoView()"
                    )
                    diagnosis = args.shots / "runbook-overload-diagnosis.png"
                    browser.screenshot(diagnosis)
                    for shot in (first, diagnosis):
                        _small_png(shot)
                        print(f"wrote {shot} ({shot.stat().st_size // 1024} KiB)")
            finally:
                browser.close()
        cmd = shlex.split(advise)
        t0 = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-m", "inferwatch.cli", *cmd[1:]],
            capture_output=True, text=True, timeout=120, cwd=REPO,
        )  # fmt: skip
        print(f"advise ran in {time.monotonic() - t0:.1f}s, exit {done.returncode}:")
        print("\n".join(done.stdout.splitlines()[:14]))
        _first_item(done.stdout)
        # the same worker from the Prometheus that fired the alert (the link's
        # `prometheus` label): ranked by the alerts that fire there
        prom = urllib.parse.parse_qs(urllib.parse.urlsplit(url).query).get("prometheus")
        if prom:
            worker = fired["labels"]["worker"]
            t0 = time.monotonic()
            done = subprocess.run(
                [sys.executable, "-m", "inferwatch.cli", "advise", "--prometheus-url", prom[0],
                 "--start", "now-2m", "--worker", worker],
                capture_output=True, text=True, timeout=120, cwd=REPO,
            )  # fmt: skip
            print(f"advise --prometheus-url ran in {time.monotonic() - t0:.1f}s:")
            print("\n".join(done.stdout.splitlines()[:6]))
            _first_item(done.stdout)
        if done.returncode:
            print(done.stderr[-800:])
        return 0
    finally:
        demo.terminate()
        try:
            demo.wait(timeout=30)
        except subprocess.TimeoutExpired:
            demo.kill()
            demo.wait()


if __name__ == "__main__":
    sys.exit(main())
