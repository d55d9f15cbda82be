"""A cached answer as it is stored: the vendor's answer exactly as the adapter gave it (a whole
Completion, or a stream's chunks as they arrived), what served it and when, compressed.

Kept in the vendor's shape, not the client's: every client shape renders it the way it renders
a fresh answer, so a hit is byte-for-byte what a miss would have sent but for ids and times.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.types import Chunk, Completion, Usage

FORMAT = 1  # bumped when the layout changes: an entry of another format is a miss
# Raw deflate with a 4 KB window and a small state: zlib's defaults allocate some 256 KB per
# call, which made compressing an answer cost ~55 us; this costs ~8 us and compresses a
# typical answer as well (gateway/cache measured in docs/cache.md).
ZLIB_LEVEL, ZLIB_WBITS, ZLIB_MEM_LEVEL = 6, -12, 4


@dataclass(frozen=True, slots=True)
class Entry:
    created_s: float  # the cache clock when it was stored
    ttl_s: int
    provider: str  # the profile whose offer served it
    model: str  # that offer's (canonical) model name
    usage: Usage  # what the vendor call used: a hit is priced from it
    completion: Completion | None = None  # a whole answer
    arrivals: tuple[tuple[Chunk, ...], ...] | None = None  # a stream, as its chunks arrived

    @property
    def streamed(self) -> bool:
        return self.arrivals is not None

    def age_s(self, now_s: float) -> int:
        return max(0, int(now_s - self.created_s))

    def fresh(self, now_s: float) -> bool:
        return now_s - self.created_s < self.ttl_s


def pack(entry: Entry) -> bytes:
    """Serialize and compress an entry."""
    doc: dict[str, Any] = {
        "f": FORMAT,
        "at": entry.created_s,
        "ttl": entry.ttl_s,
        "provider": entry.provider,
        "model": entry.model,
        "usage": _usage_list(entry.usage),
    }
    if entry.completion is not None:
        c = entry.completion
        doc["completion"] = [c.shape, c.data, c.text, c.finish_reason, c.model]
    if entry.arrivals is not None:
        doc["arrivals"] = [[_chunk_list(chunk) for chunk in arrival] for arrival in entry.arrivals]
    deflate = zlib.compressobj(ZLIB_LEVEL, zlib.DEFLATED, ZLIB_WBITS, ZLIB_MEM_LEVEL)
    return deflate.compress(orjson.dumps(doc)) + deflate.flush()


def unpack(raw: bytes) -> Entry | None:
    """Return the entry stored as `raw`, or None for one of another format (or damaged)."""
    try:
        doc = orjson.loads(zlib.decompress(raw, ZLIB_WBITS))
        if doc.get("f") != FORMAT:
            return None
        usage = Usage(*doc["usage"])
        completion = None
        if "completion" in doc:
            shape, data, text, finish_reason, model = doc["completion"]
            completion = Completion(shape, data, text, finish_reason, usage, model)
        arrivals = None
        if "arrivals" in doc:
            arrivals = tuple(tuple(_chunk(item) for item in arrival) for arrival in doc["arrivals"])
        return Entry(
            created_s=doc["at"],
            ttl_s=doc["ttl"],
            provider=doc["provider"],
            model=doc["model"],
            usage=usage,
            completion=completion,
            arrivals=arrivals,
        )
    except (zlib.error, orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        return None


def _usage_list(usage: Usage) -> list[int]:
    return [
        usage.input_tokens,
        usage.output_tokens,
        usage.cache_read_tokens,
        usage.cache_write_tokens,
        usage.reasoning_tokens,
    ]


def _chunk_list(chunk: Chunk) -> list:
    usage = _usage_list(chunk.usage) if chunk.usage is not None else None
    return [chunk.shape, chunk.event, chunk.text, chunk.generated, chunk.finish_reason, usage]


def _chunk(item: list) -> Chunk:
    shape, event, text, generated, finish_reason, usage = item
    return Chunk(
        shape=shape,
        event=event,
        text=text,
        generated=generated,
        finish_reason=finish_reason,
        usage=Usage(*usage) if usage is not None else None,
    )
