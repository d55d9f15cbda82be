"""Request ids: the uuid4 hex shape, ordered by the millisecond they were minted."""

from __future__ import annotations

import re
import time

from core.ids import time_ordered_id


def test_an_id_is_32_hex_characters_starting_with_its_millisecond():
    minted_ns = 1_796_198_400_123_456_789  # 2026-12-02 ...:00.123 UTC

    request_id = time_ordered_id(minted_ns)

    assert re.fullmatch(r"[0-9a-f]{32}", request_id)
    assert int(request_id[:12], 16) == 1_796_198_400_123


def test_ids_sort_as_they_were_minted_and_never_repeat():
    start = time.time_ns()
    ids = [time_ordered_id(start + i * 1_000_000) for i in range(2_000)]  # one per millisecond
    same_millisecond = {time_ordered_id(start) for _ in range(10_000)}

    assert ids == sorted(ids)
    assert len(set(ids)) == 2_000
    assert len(same_millisecond) == 10_000
    assert abs(int(time_ordered_id()[:12], 16) - time.time_ns() // 1_000_000) < 5_000
