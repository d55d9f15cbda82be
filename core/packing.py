"""Small JSON texts stored compactly: a version byte, then raw deflate primed with that
version's fixed dictionary.

PostgreSQL leaves a value under 2 KB uncompressed, and deflate alone gains little on a few
hundred bytes. Primed with a dictionary of typical texts, deflate keeps only what differs
(ids, times, counts): a receipt body (billing/receipt_codec.py) or a usage row's attempt trail
(usage/trail.py) shrinks to a fraction. A version's dictionary never changes once values are
packed with it: a new dictionary is a new version, and the old one stays to read them.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping


class DictionaryCodec:
    """Pack and unpack bytes with versioned deflate dictionaries; the newest version packs."""

    def __init__(
        self,
        dictionaries: Mapping[int, bytes],
        *,
        what: str,
        level: int = 9,
        window_bits: int = 12,
        mem_level: int = 4,
    ):
        # Version bytes stay below 0x20: never a JSON text's first byte, so a reader may tell
        # a packed value from plain JSON stored as is.
        if not all(0 < version < 0x20 for version in dictionaries):
            raise ValueError("version bytes are 1..31")
        self.dictionaries = dict(dictionaries)
        self.newest = max(self.dictionaries)
        self.what = what
        # Deflate only looks back this far and hashes into 2^(mem_level + 7) slots: a small
        # window and table cost less to set up (a packer per value: ~6 us at 12 bits and
        # mem level 4, ~57 us at 15 and 9: zlib allocates and clears ~260 KB for that one)
        # and still reach a dictionary no longer than the window. Unpacking always allows the
        # largest window, so values packed with a larger one before still read back.
        # Primed once: a copy per value (deflateCopy) skips hashing the dictionary in again,
        # ~90k instructions a value. It is only ever copied, never fed. `level` is deflate's
        # search effort: any level reads back the same; a codec of long values may trade a
        # few bytes for half the time.
        self._primed = zlib.compressobj(
            level, zlib.DEFLATED, -window_bits, mem_level, zdict=self.dictionaries[self.newest]
        )

    def pack(self, data: bytes) -> bytes:
        """`data` as stored: the newest version byte + raw deflate primed with its dictionary."""
        packer = self._primed.copy()
        return bytes((self.newest,)) + packer.compress(data) + packer.flush()

    def unpack(self, stored: bytes | memoryview) -> bytes:
        """The bytes a stored value packs (ValueError: not a value of this codec)."""
        data = bytes(stored)
        dictionary = self.dictionaries.get(data[0]) if data else None
        if dictionary is None:
            raise ValueError(f"not a packed {self.what}")
        unpacker = zlib.decompressobj(-zlib.MAX_WBITS, zdict=dictionary)
        try:
            return unpacker.decompress(data[1:]) + unpacker.flush()
        except zlib.error as exc:
            raise ValueError(f"not a packed {self.what}: {exc}") from None
