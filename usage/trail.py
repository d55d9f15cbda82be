"""How a usage row keeps its attempt trail: one column of a few dozen bytes.

A trail was a table of its own, a row per attempt (~160 B of heap and ~56 B of two indexes
for ~1.03 attempts per request). Now it is the log row's `attempt_trail`: each attempt a
positional JSON array in ATTEMPT_FIELDS order, the list deflated against a fixed dictionary
of typical trails (core/packing.py). A one-attempt trail packs to ~10-25 bytes, one with
provider and model names the dictionary does not know to ~45; no attempt is empty bytes.

Plain JSON (its first byte `[`) reads too: migration usage 0012 filled the column from the
old table in SQL. Packed values start with a version byte below 0x20, never `[`. The version's
dictionary never changes once trails are packed with it: a new dictionary is a new version.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import orjson
from django.db import models

from core.packing import DictionaryCodec
from core.usage_record import ATTEMPT_FIELDS, AttemptRecord

V1 = 1
# Trails as the gateway writes them, the most usual last (a match close by costs fewer bits):
# the outcomes, served_by values and source shapes, common providers and models, demo names.
# Never edit: packed trails need it byte for byte.
DICTIONARY_V1 = (
    b'[[1,"stub-openai","gpt-4o-mini","team","stub-openai:gpt-4o-mini:team","keys_busy'
    b'",null,0,null,""],[2,"stub-anthropic","claude-3-5-haiku","platform","stub-anthro'
    b'pic:claude-3-5-haiku:platform-fallback","wallet_insufficient",null,0,null,""],[3'
    b',"stub-azure","azure-gpt-4o-mini","","stub-azure:azure-gpt-4o-mini","no_attempt"'
    b',null,0,null,""],[4,"stub-bedrock","bedrock-haiku","","stub-bedrock:bedrock-haik'
    b'u","chain_locked",null,0,null,""],[5,"stub-gemini","gemini-2.5-flash","platform"'
    b',"stub-gemini:gemini-2.5-flash:platform","refused_by_vendor",403,12,null,""],[6,'
    b'"stub-vertex","vertex-gemini-flash","platform","stub-vertex:vertex-gemini-flash:'
    b'platform","invalid_request",400,9,null,""],[7,"stub-openai-pooled","gpt-4o-mini-'
    b'pooled","platform","stub-openai-pooled:gpt-4o-mini-pooled:platform","insufficien'
    b't_quota",402,5,null,"pool-1"]][[1,"gemini","gemini-2.5-pro","platform","gemini:g'
    b'emini-2.5-pro:platform","ok",200,1500,1,""]][[1,"mistral","mistral-large-latest"'
    b',"team","mistral:mistral-large-latest:team","ok",200,900,null,""]][[1,"deepseek"'
    b',"deepseek-chat","platform","deepseek:deepseek-chat:platform","ok",200,900,1,""]'
    b'][[1,"bedrock","anthropic.claude-3-7-sonnet","platform","bedrock:anthropic.claud'
    b'e-3-7-sonnet:platform","ok",200,900,1,""]][[1,"azure","gpt-4o","platform","azure'
    b':gpt-4o:platform","ok",200,900,1,""]][[1,"direct","","platform","direct::platfor'
    b'm","ok",200,1200,null,""]][[1,"stub-search","","platform","stub-search::platform'
    b'","ok",200,800,null,""]][[1,"stub-render","","platform","stub-render::platform",'
    b'"ok",200,2400,null,""]][[1,"openrouter","meta-llama/llama-3.1-70b","platform","o'
    b'penrouter:meta-llama/llama-3.1-70b:platform","ok",200,700,1,""]][[1,"anthropic",'
    b'"claude-sonnet-4-20250514","","anthropic:claude-sonnet-4-20250514","circuit_open'
    b'",null,0,null,""]][[1,"anthropic-main","claude-sonnet-4-20250514","platform","an'
    b'thropic-main:claude-sonnet-4-20250514:platform","ok",200,900,1,""]][[1,"anthropi'
    b'c-main","claude-3-5-haiku-latest","team","anthropic-main:claude-3-5-haiku-latest'
    b':team","ok",200,600,null,"team"]][[1,"openai","gpt-4.1-mini","team","openai:gpt-'
    b'4.1-mini:team","upstream_error",500,80,null,"key-1"],[2,"openai","gpt-4.1","plat'
    b'form","openai:gpt-4.1:platform-fallback","ok",200,900,1,""]][[1,"openai","o3-min'
    b'i","platform","openai:o3-mini:platform","timeout",null,30000,1,""]][[1,"openai",'
    b'"o4-mini","platform","openai:o4-mini:platform","upstream_error",502,50,1,""]][[1'
    b',"openai-main","gpt-4o-2024-08-06","platform","openai-main:gpt-4o-2024-08-06:pla'
    b'tform","rate_limited",429,300,1,""],[2,"openai-main","gpt-4o-2024-08-06","platfo'
    b'rm","openai-main:gpt-4o-2024-08-06:platform","ok",200,300,1,""]][[1,"openai-main'
    b'","gpt-4o-mini","team","openai-main:gpt-4o-mini:team","upstream_error",429,90,nu'
    b'll,"primary"],[2,"openai-main","gpt-4o-mini","team","openai-main:gpt-4o-mini:tea'
    b'm","ok",200,500,null,"secondary"]][[1,"openai-main","gpt-4o-mini","platform","op'
    b'enai-main:gpt-4o-mini:platform","ok",200,'
)
# A 4 KB window reaches the whole dictionary; a small hash table keeps a packer cheap.
CODEC = DictionaryCodec({V1: DICTIONARY_V1}, what="attempt trail")
# What each text of an attempt is cut to (usage/rows.py): the lengths its columns had.
TEXT_LENGTHS = {
    "provider": 64,
    "model": 200,
    "served_by": 8,
    "source": 64,
    "outcome": 32,
    "key_label": 64,
}


def pack_trail(attempts: Sequence[AttemptRecord]) -> bytes:
    """The trail as stored: packed positional arrays, or empty bytes for no attempt."""
    if not attempts:
        return b""
    return CODEC.pack(orjson.dumps([[getattr(a, n) for n in ATTEMPT_FIELDS] for a in attempts]))


def trail_json(stored: bytes | memoryview | None) -> bytes:
    """The JSON text of a stored trail (packed, or plain JSON arrays); empty for none."""
    data = bytes(stored or b"")
    return data if not data or data[:1] == b"[" else CODEC.unpack(data)


def unpack_trail(stored: bytes | memoryview | None) -> tuple[AttemptRecord, ...]:
    """The attempts of a stored trail, in order (packed, or plain JSON arrays)."""
    text = trail_json(stored)
    return tuple(AttemptRecord(*row) for row in orjson.loads(text)) if text else ()


class AttemptTrailField(models.BinaryField):
    """The log's trail column: its stored bytes in Python (read them with unpack_trail), its
    JSON text in a dump, so dumpdata shows what a trail holds as it shows the other columns
    (a privacy check searching a dump sees inside it), and loaddata stores it back as plain
    JSON."""

    def to_python(self, value: Any) -> Any:
        if isinstance(value, str):  # a dump's JSON text, not base64
            return value.encode()
        return super().to_python(value)

    def value_to_string(self, obj: Any) -> str:
        # cast: the stubs type a BinaryField subclass's value as its unbound type variable.
        return trail_json(cast("bytes | memoryview | None", self.value_from_object(obj))).decode()
