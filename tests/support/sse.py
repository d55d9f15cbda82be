"""Server-sent event bodies, split into events."""

from __future__ import annotations


def sse_events(text: str) -> list[tuple[str, str]]:
    """Split an SSE body into (event name, data) pairs ("" when the event is unnamed)."""
    events = []
    for block in text.split("\n\n"):
        name, data = "", []
        for line in block.splitlines():
            if line.startswith("event:"):
                name = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].strip())
        if data:
            events.append((name, "\n".join(data)))
    return events
