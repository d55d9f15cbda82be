"""What the audit tests share: the trail's entries as exported, and admin forms posted as a
browser posts them."""

from __future__ import annotations

import re
from html.parser import HTMLParser

from audit.models import AuditEntry

# The fields an entry's test compares (id, seq, time and hashes are the chain's own).
SAID = (
    "actor_kind",
    "actor_id",
    "actor_label",
    "remote_addr",
    "action",
    "target_type",
    "target_id",
    "target_label",
    "before",
    "after",
    "consent",
)


def said(entry: AuditEntry) -> dict:
    record = entry.as_record()
    return {name: record[name] for name in SAID}


def trail(account_id: int | None) -> list[AuditEntry]:
    """The account's entries, oldest first."""
    return list(AuditEntry.objects.filter(account_id=account_id).order_by("seq"))


def last(account_id: int | None, action: str) -> AuditEntry:
    return AuditEntry.objects.filter(account_id=account_id, action=action).latest("id")


class _Form(HTMLParser):
    """The fields a browser would submit from a page's forms (the last value of a name)."""

    def __init__(self) -> None:
        super().__init__()
        self.values: dict[str, str] = {}
        self._select: str | None = None
        self._textarea: str | None = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        name = a.get("name")
        if tag == "input" and name and name != "csrfmiddlewaretoken":
            kind = a.get("type", "text")
            if kind in ("checkbox", "radio"):
                if "checked" in a:
                    self.values[name] = a.get("value") or "on"
            elif kind not in ("submit", "button", "file"):
                self.values[name] = a.get("value") or ""
        elif tag == "select" and name:
            self._select = name
            self.values.setdefault(name, "")
        elif tag == "option" and self._select and "selected" in a:
            self.values[self._select] = a.get("value") or ""
        elif tag == "textarea" and name:
            self._textarea = name
            self.values[name] = ""

    def handle_data(self, data):
        if self._textarea:
            self.values[self._textarea] += data

    def handle_endtag(self, tag):
        if tag == "select":
            self._select = None
        elif tag == "textarea":
            if self._textarea:
                self.values[self._textarea] = self.values[self._textarea].removeprefix("\n")
            self._textarea = None


def form_fields(html: str) -> dict[str, str]:
    parser = _Form()
    parser.feed(re.sub(r"<template\b.*?</template>", "", html, flags=re.S))
    return parser.values
