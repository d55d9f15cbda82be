"""Request ids: the uuid4 hex shape, ordered by the millisecond they were minted."""

from __future__ import annotations

import os
import re
import threading
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


def test_threads_minting_at_once_never_hand_out_the_same_randomness():
    # Randomness is read from the OS 4 KB at a time: each thread reads its own.
    minted: list[list[str]] = [[] for _ in range(8)]
    ready = threading.Barrier(8)

    def mint(into: list[str]) -> None:
        ready.wait()
        into.extend(time_ordered_id(0)[12:] for _ in range(3_000))

    threads = [threading.Thread(target=mint, args=(into,)) for into in minted]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    tails = [tail for into in minted for tail in into]
    assert len(tails) == 24_000 and len(set(tails)) == 24_000


def test_a_forked_child_does_not_repeat_its_parents_randomness():
    time_ordered_id()  # the parent has unread randomness when it forks
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next 50 ids' random parts, then out
        os.write(write, "".join(time_ordered_id(0)[12:] for _ in range(50)).encode())
        os._exit(0)
    os.waitpid(pid, 0)
    child = os.read(read, 4096).decode()
    parent = "".join(time_ordered_id(0)[12:] for _ in range(50))
    os.close(read)
    os.close(write)

    assert len(child) == len(parent) == 1_000
    assert not {child[i : i + 20] for i in range(0, 1_000, 20)} & {
        parent[i : i + 20] for i in range(0, 1_000, 20)
    }
