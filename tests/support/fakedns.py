"""A resolver the test injects: an event loop whose getaddrinfo answers some names from a
table, the one resolver our fetcher (and the renderer's guard) asks, off the loop."""

from __future__ import annotations

import asyncio
import socket


class FakeDnsLoop(asyncio.SelectorEventLoop):
    """Answer the names in `answers` (name -> addresses; an empty list: no such name); look
    every other name up for real. `lookups` lists the names asked, in order."""

    def __init__(self, answers: dict[str, list[str]]) -> None:
        super().__init__()
        self.answers = answers
        self.lookups: list[str] = []

    async def getaddrinfo(self, host, port, *, family=0, type=0, proto=0, flags=0):
        name = host.decode() if isinstance(host, bytes) else str(host)
        if name not in self.answers:
            return await super().getaddrinfo(
                host, port, family=family, type=type, proto=proto, flags=flags
            )
        self.lookups.append(name)
        if not self.answers[name]:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return [
            (
                socket.AF_INET6 if ":" in address else socket.AF_INET,
                socket.SOCK_STREAM,
                6,
                "",
                (address, port or 0, 0, 0) if ":" in address else (address, port or 0),
            )
            for address in self.answers[name]
        ]


def scripted_names(monkeypatch) -> tuple[dict[str, list[str]], list[str]]:
    """Script socket.getaddrinfo (the resolver a thread's lookup uses): name -> the addresses
    its successive lookups answer (the last one repeats); every other name is looked up for
    real. Returns the table to fill and the list of names asked, in order."""
    answers: dict[str, list[str]] = {}
    asked: list[str] = []
    real = socket.getaddrinfo

    def getaddrinfo(host, port, *args, **kwargs):
        name = host.decode() if isinstance(host, bytes) else host
        if name not in answers:
            return real(host, port, *args, **kwargs)
        asked.append(name)
        queue = answers[name]
        address = queue.pop(0) if len(queue) > 1 else queue[0]
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port))]

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return answers, asked
