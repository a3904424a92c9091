"""The report as a mail, and its delivery over SMTP.

The message is built completely (every chart rendered, the CSV written) before
a connection is opened, and delivered in one SMTP transaction: every recipient
is accepted first, or the transaction is reset and nothing is sent. So a
failure never leaves a half-sent report.

Structure::

    multipart/mixed
      multipart/related; type="multipart/alternative"
        multipart/alternative
          text/plain
          text/html            <img src="cid:...">
        image/png (Content-ID, inline) ...
      text/csv (attachment)
"""

from __future__ import annotations

import smtplib
import socket
import ssl
from collections.abc import Sequence
from email.header import Header
from email.mime.image import MIMEImage
from email.mime.multipart import MIMEMultipart
from email.mime.text import MIMEText
from email.policy import compat32
from email.utils import formatdate, make_msgid, parseaddr
from typing import cast

from inferwatch.report.charts import Chart
from inferwatch.report.promapi import ReportError
from inferwatch.report.settings import SmtpSettings

CID_DOMAIN = "inferwatch.report"


class MailError(ReportError):
    exit_code = 6


def content_id(chart: Chart) -> str:
    return f"{chart.name}@{CID_DOMAIN}"


def build_message(
    *,
    subject: str,
    sender: str,
    to: Sequence[str],
    text: str,
    html: str,
    charts: Sequence[Chart],
    csv_name: str,
    csv_text: str,
) -> MIMEMultipart:
    """The whole mail; ``html`` refers to each chart as ``cid:<content_id(chart)>``."""
    alternative = MIMEMultipart("alternative")
    alternative.attach(MIMEText(text, "plain", "utf-8"))
    alternative.attach(MIMEText(html, "html", "utf-8"))
    related = MIMEMultipart("related", type="multipart/alternative")
    related.attach(alternative)
    for chart in charts:
        image = MIMEImage(chart.png, "png")
        image.add_header("Content-ID", f"<{content_id(chart)}>")
        image.add_header("Content-Disposition", "inline", filename=f"{chart.name}.png")
        related.attach(image)
    message = MIMEMultipart("mixed")
    message.attach(related)
    attachment = MIMEText(csv_text, "csv", "utf-8")
    attachment.add_header("Content-Disposition", "attachment", filename=csv_name)
    message.attach(attachment)

    # A Header object encodes non-ASCII subjects (RFC 2047); compat32 accepts it.
    message["Subject"] = cast(str, Header(subject, "utf-8"))
    message["From"] = sender
    message["To"] = ", ".join(to)
    message["Date"] = formatdate(localtime=False, usegmt=True)
    domain = parseaddr(sender)[1].rpartition("@")[2] or None
    message["Message-ID"] = make_msgid("inferwatch-report", domain=domain)
    # RFC 3834: an automatic message; vacation responders stay quiet.
    message["Auto-Submitted"] = "auto-generated"
    return message


def send(message: MIMEMultipart, smtp: SmtpSettings, timeout: float = 60.0) -> None:
    """Deliver ``message`` to ``smtp.to`` in one transaction; raise MailError on any failure."""
    smtp.check_complete()
    assert smtp.host is not None and smtp.sender is not None
    host, port = smtp.host, smtp.effective_port
    where = f"{host}:{port}"
    # SMTP wants CRLF line ends; smtplib passes bytes through as they are.
    data = message.as_bytes(policy=compat32.clone(linesep="\r\n"))
    envelope_from = parseaddr(smtp.sender)[1] or smtp.sender
    recipients = [parseaddr(r)[1] or r for r in smtp.to]
    context = ssl.create_default_context()
    client: smtplib.SMTP | None = None
    try:
        try:
            if smtp.security == "tls":
                client = smtplib.SMTP_SSL(host, port, timeout=timeout, context=context)
            else:
                client = smtplib.SMTP(host, port, timeout=timeout)
        except (OSError, smtplib.SMTPException) as err:
            raise MailError(
                f"cannot connect to the SMTP server {where}: {_reason(err)}; no mail was sent"
            ) from None
        client.ehlo()
        if smtp.security == "starttls":
            if not client.has_extn("starttls"):
                raise MailError(
                    f"the SMTP server {where} does not offer STARTTLS; set "
                    "security to tls or none; no mail was sent"
                )
            client.starttls(context=context)
            client.ehlo()
        if smtp.username:
            assert smtp.password is not None
            try:
                client.login(smtp.username, smtp.password)
            except smtplib.SMTPAuthenticationError as err:
                raise MailError(
                    f"SMTP authentication failed for user {smtp.username!r} at {where} "
                    f"({err.smtp_code} {_text(err.smtp_error)}); no mail was sent"
                ) from None
            except smtplib.SMTPNotSupportedError:
                raise MailError(
                    f"the SMTP server {where} does not offer AUTH on this "
                    "connection (does it need STARTTLS?); no mail was sent"
                ) from None
        code, resp = client.mail(envelope_from)
        if code != 250:
            client.rset()
            raise MailError(
                f"the SMTP server {where} refused the sender {envelope_from} "
                f"({code} {_text(resp)}); no mail was sent"
            )
        refused = []
        for rcpt in recipients:
            code, resp = client.rcpt(rcpt)
            if code not in (250, 251):
                refused.append(f"{rcpt} ({code} {_text(resp)})")
        if refused:
            client.rset()
            raise MailError(
                f"the SMTP server {where} refused "
                + ", ".join(refused)
                + "; no mail was sent to anyone"
            )
        code, resp = client.data(data)
        if code != 250:
            raise MailError(
                f"the SMTP server {where} did not accept the message "
                f"({code} {_text(resp)}); no mail was sent"
            )
    except MailError:
        raise
    except ssl.SSLError as err:
        raise MailError(
            f"TLS with the SMTP server {where} failed: {err.reason or err}; no mail was sent"
        ) from None
    except smtplib.SMTPResponseException as err:
        raise MailError(
            f"the SMTP server {where} answered {err.smtp_code} "
            f"{_text(err.smtp_error)}; no mail was sent"
        ) from None
    except (smtplib.SMTPException, OSError) as err:
        raise MailError(f"SMTP with {where} failed: {_reason(err)}; no mail was sent") from None
    finally:
        if client is not None:
            try:
                client.quit()
            except (smtplib.SMTPException, OSError):
                client.close()


def _text(value: bytes | str) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace").strip()
    return str(value).strip()


def _reason(err: BaseException) -> str:
    if isinstance(err, socket.timeout):
        return "timed out"
    if isinstance(err, OSError) and err.strerror:
        return err.strerror
    return str(err) or type(err).__name__
