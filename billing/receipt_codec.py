"""How a receipt is stored: its body's canonical JSON deflated against a fixed dictionary, and
its hash as 32 bytes.

A body is ~1.2-1.4 KB of JSON whose keys and most values repeat from receipt to receipt,
just under PostgreSQL's own 2 KB compression threshold, so it was stored whole. Deflate primed
with a dictionary of typical bodies keeps only what differs (hashes, ids, times, counts):
~200-250 bytes. What is hashed, signed and served is always the JSON text; the stored bytes
are a version byte then raw deflate, and a version's dictionary never changes once receipts
are packed with it (a new dictionary is a new version, and the old one stays to read them).
The packing itself is core/packing.py's, shared with the usage rows' attempt trails.
"""

from __future__ import annotations

from typing import Any

from django.db import models

from core.packing import DictionaryCodec

V1 = 1
# Two receipts' bodies (team-served, and platform-served with prices, a retried attempt and
# wallet entries): keys and structure as billing/receipts.py writes them. Never edit: packed
# receipts need it byte for byte.
DICTIONARY_V1 = (
    b'{"account_id":1,"amounts":{"bandwidth_micro":1,"provider_cost_micro":1,"total_micro":2,"'
    b'uncollected_micro":0},"api_key_id":1,"attempts":[{"model":"claude-3-5-haiku","order":1,"'
    b'outcome":"ok","paid_by":"team","prices":{},"provider":"anthropic-main","provider_cost_mi'
    b'cro":0,"tokens":{"cache_read":0,"cache_write":0,"input":10,"output":20,"reasoning":0},"u'
    b'pstream_status":200,"web_units":{"pages":0,"queries":0,"rendered_pages":0}}],"bytes":{"i'
    b'n":0,"out":0},"client_request_id":"","created_at":"2026-01-01T00:00:00Z","endpoint":"mes'
    b'sages","error_code":"","group_id":1,"kind":"charge","measured":{"bandwidth_micro":0,"pro'
    b'vider_cost_micro":0},"model_requested":"claude-3-5-haiku","model_served":"claude-3-5-hai'
    b'ku","paid_by":"team","prev":"00000000000000000000000000000000000000000000000000000000000'
    b'00000","prices":{},"provider":"anthropic-main","request_id":"000000000000000000000000000'
    b'00000","running":{"bandwidth_micro":1,"provider_cost_micro":1,"uncollected_micro":0,"wal'
    b'let_taken_micro":1},"seq":1,"settled_at":"2026-01-01T00:00:00.000000Z","status":200,"tok'
    b'ens":{"cache_read":0,"cache_write":0,"input":10,"output":20,"reasoning":0},"v":1,"wallet'
    b'":{"ledger_entries":[],"taken_micro":1},"web_units":{"pages":0,"queries":0,"rendered_pag'
    b'es":0}}{"account_id":1,"amounts":{"bandwidth_micro":1,"provider_cost_micro":1,"total_mic'
    b'ro":2,"uncollected_micro":0},"api_key_id":1,"attempts":[{"model":"gpt-4o-mini","order":1'
    b',"outcome":"error","paid_by":"platform","provider":"stub-openai","provider_cost_micro":0'
    b',"upstream_status":429},{"model":"gpt-4o-mini","order":2,"outcome":"ok","paid_by":"platf'
    b'orm","prices":{"cache_read_micro_per_mtok":75000,"cache_write_micro_per_mtok":0,"input_m'
    b'icro_per_mtok":150000,"output_micro_per_mtok":600000,"reasoning_micro_per_mtok":600000},'
    b'"provider":"stub-openai","provider_cost_micro":30,"tokens":{"cache_read":0,"cache_write"'
    b':0,"input":10,"output":20,"reasoning":0},"upstream_status":200,"web_units":{"pages":0,"q'
    b'ueries":0,"rendered_pages":0}}],"bytes":{"in":100,"out":200},"client_request_id":"req","'
    b'created_at":"2026-01-01T00:00:00Z","endpoint":"chat","error_code":"","group_id":1,"kind"'
    b':"charge","measured":{"bandwidth_micro":1,"provider_cost_micro":30},"model_requested":"g'
    b'pt-4o-mini","model_served":"gpt-4o-mini","paid_by":"platform","prev":"000000000000000000'
    b'0000000000000000000000000000000000000000000000","prices":{"cache_read_micro_per_mtok":75'
    b'000,"cache_write_micro_per_mtok":0,"input_micro_per_mtok":150000,"output_micro_per_mtok"'
    b':600000,"reasoning_micro_per_mtok":600000},"provider":"stub-openai","request_id":"000000'
    b'00000000000000000000000000","running":{"bandwidth_micro":1,"provider_cost_micro":1,"unco'
    b'llected_micro":0,"wallet_taken_micro":1},"seq":1,"settled_at":"2026-01-01T00:00:00.00000'
    b'0Z","status":200,"tokens":{"cache_read":0,"cache_write":0,"input":10,"output":20,"reason'
    b'ing":0},"v":1,"wallet":{"ledger_entries":[1,2],"taken_micro":1},"web_units":{"pages":0,"'
    b'queries":0,"rendered_pages":0}}'
)
DICTIONARIES = {V1: DICTIONARY_V1}
# The packer's 4 KB window holds the dictionary (2,935 bytes) and a body's nearest repeats;
# receipts packed before with a 32 KB window still read back (unpacking allows any window).
# Deflate's level 3, not 9: a 1.5 KB body packs in half the time (~11 us against ~23) to a
# few bytes more (~180 against ~175; tests/billing/test_receipt_storage.py keeps the bound).
CODEC = DictionaryCodec(DICTIONARIES, what="receipt body", level=3)


def pack(text: str) -> bytes:
    """A body's JSON text as stored: version byte + raw deflate primed with its dictionary."""
    return CODEC.pack(text.encode())


def unpack(stored: bytes | memoryview) -> str:
    """The JSON text of a stored body (ValueError: not a packed body)."""
    return CODEC.unpack(stored).decode()


class PackedJsonField(models.BinaryField):
    """A receipt body's column: the JSON text in Python, packed bytes in the database."""

    # What django-stubs reads as the Python type of the field's values.
    _pyi_private_set_type: str
    _pyi_private_get_type: str  # type: ignore[assignment]

    def from_db_value(self, value: Any, expression: Any, connection: Any) -> str | None:
        return None if value is None else unpack(value)

    def to_python(self, value: Any) -> str | None:
        if value is None or isinstance(value, str):
            return value
        return unpack(value)

    def get_prep_value(self, value: Any) -> Any:
        return pack(value) if isinstance(value, str) else value

    def value_to_string(self, obj: Any) -> str:
        """The JSON text, as serializers (dumpdata) write it and to_python reads it back."""
        return str(self.value_from_object(obj))


class HexDigestField(models.BinaryField):
    """A SHA-256 digest's column: hex text in Python (what is hashed, signed and served), its
    32 bytes in the database."""

    _pyi_private_set_type: str
    _pyi_private_get_type: str  # type: ignore[assignment]

    def from_db_value(self, value: Any, expression: Any, connection: Any) -> str | None:
        if value is None or isinstance(value, str):  # SQLite keeps digests stored as text
            return value
        return bytes(value).hex()

    def to_python(self, value: Any) -> str | None:
        if value is None or isinstance(value, str):
            return value
        return bytes(value).hex()

    def get_prep_value(self, value: Any) -> Any:
        return bytes.fromhex(value) if isinstance(value, str) else value

    def value_to_string(self, obj: Any) -> str:
        """The hex digest, as serializers (dumpdata) write it and to_python reads it back."""
        return str(self.value_from_object(obj))
