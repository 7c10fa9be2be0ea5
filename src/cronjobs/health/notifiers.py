"""Where alerts go: a webhook (HTTP POST of JSON), a Telegram bot, an SMTP server.

Each notifier is built from the settings only when configured; `send(alert)` raises on
failure (the caller logs it and tries again at the next health run).
"""

from __future__ import annotations

import json
import smtplib
import urllib.request
from email.message import EmailMessage

from ..config import Settings


class WebhookNotifier:
    """POSTs the alert as JSON (`{"event", "status", "problems", "recovered", "text", ...}`)."""

    name = "webhook"

    def __init__(self, url: str, timeout_seconds: float) -> None:
        self.url, self.timeout = url, timeout_seconds

    def send(self, alert: dict) -> None:
        """POST `alert`; raises on a network error or a non-2xx answer."""
        _post_json(self.url, alert, self.timeout)


class TelegramNotifier:
    """Sends the alert's text with the Bot API's `sendMessage`."""

    name = "telegram"

    def __init__(self, api_url: str, token: str, chat_id: str, timeout_seconds: float) -> None:
        self.url = f"{api_url.rstrip('/')}/bot{token}/sendMessage"
        self.chat_id, self.timeout = chat_id, timeout_seconds

    def send(self, alert: dict) -> None:
        """Send the text; raises on a network error or a non-2xx answer."""
        _post_json(self.url, {"chat_id": self.chat_id, "text": alert["text"][:4000],
                              "disable_web_page_preview": True}, self.timeout)


class SmtpNotifier:
    """Mails the alert (subject: the alert's first line) to the configured recipients."""

    name = "smtp"

    def __init__(self, s: Settings) -> None:
        self.s = s

    def send(self, alert: dict) -> None:
        """Send one mail; raises `smtplib.SMTPException` / `OSError` on failure."""
        s = self.s
        msg = EmailMessage()
        msg["Subject"] = alert["subject"]
        msg["From"] = s.alerts.smtp_from
        msg["To"] = ", ".join(s.alerts.smtp_to)
        msg.set_content(alert["text"])
        with smtplib.SMTP(s.alerts.smtp_host, s.alerts.smtp_port,
                          timeout=s.alerts.timeout_seconds) as smtp:
            if s.alerts.smtp_starttls:
                smtp.starttls()
            if s.alerts.smtp_username:
                smtp.login(s.alerts.smtp_username, s.alerts.smtp_password or "")
            smtp.send_message(msg)


def notifiers(s: Settings) -> list:
    """The notifiers configured in `s` (possibly none)."""
    found: list = []
    if s.alerts.webhook_url:
        found.append(WebhookNotifier(s.alerts.webhook_url, s.alerts.timeout_seconds))
    if s.alerts.telegram_bot_token and s.alerts.telegram_chat_id:
        found.append(TelegramNotifier(s.alerts.telegram_api_url, s.alerts.telegram_bot_token,
                                      s.alerts.telegram_chat_id, s.alerts.timeout_seconds))
    if s.alerts.smtp_host and s.alerts.smtp_to:
        found.append(SmtpNotifier(s))
    return found


def _post_json(url: str, body: dict, timeout: float) -> None:
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"alert URL must start with http:// or https://, got {url!r}")
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as resp:
        if not 200 <= resp.status < 300:
            raise OSError(f"{url} answered HTTP {resp.status}")
