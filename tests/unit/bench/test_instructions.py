"""bench/instructions.py's reading of callgrind's dumps and its table: instructions per request
by thread (the event loop's first), and a gw-X scenario's total over bare-X's."""

from __future__ import annotations

from pathlib import Path

from bench.instructions import LOOP_THREAD, Row, pacing_fault, read_dump, table


def dump(directory: Path, name: str, instructions: int) -> None:
    (directory / name).write_text(
        f"# callgrind format\nversion: 1\ncreator: callgrind-3.19.0\npid: 7\n"
        f"events: Ir\nsummary: {instructions}\n\nfn=(1) main\n0 {instructions}\n"
        f"totals: {instructions}\n"
    )


def test_the_newest_dump_of_the_process_is_read_thread_by_thread(tmp_path):
    dump(tmp_path, "7.out.1-01", 10)  # an earlier scenario's count
    dump(tmp_path, "7.out.1-02", 20)
    dump(tmp_path, "7.out.2-01", 600_000_000)
    dump(tmp_path, "7.out.2-02", 240_000_000)
    dump(tmp_path, "7.out.2-05", 0)
    dump(tmp_path, "8.out.2-01", 999)  # another process's
    dump(tmp_path, "7.out-01", 5)  # what valgrind writes as the process exits

    assert read_dump(tmp_path, 7) == {1: 600_000_000, 2: 240_000_000, 5: 0}
    assert read_dump(tmp_path, 9) == {}


def test_the_table_splits_the_event_loop_from_the_other_threads_and_divides_by_the_floor():
    rows = [
        Row("bare-openai", 300, {LOOP_THREAD: 0.5}),
        Row("gw-openai", 300, {LOOP_THREAD: 2.0, 2: 0.75, 3: 0.25}),
        Row("gw-anthropic", 300, {LOOP_THREAD: 2.5}),  # no bare-anthropic counted
    ]

    lines = table(rows).splitlines()

    assert lines[0].split() == [
        "scenario",
        "n",
        "Minstr/req",
        "event",
        "loop",
        "others",
        "gw",
        "/",
        "bare",
    ]
    assert lines[1].split() == ["bare-openai", "300", "0.500", "0.500", "0.000", "-"]
    assert lines[2].split() == ["gw-openai", "300", "3.000", "2.000", "1.000", "6.00"]
    assert lines[3].split() == ["gw-anthropic", "300", "2.500", "2.500", "0.000", "-"]


def test_a_paced_row_is_divided_by_the_paced_floor():
    rows = [
        Row("bare-openai-stream paced", 100, {LOOP_THREAD: 1.0}),
        Row("gw-openai-stream paced", 100, {LOOP_THREAD: 4.0, 2: 1.0}),
    ]

    assert table(rows).splitlines()[2].split() == [
        "gw-openai-stream", "paced", "100", "5.000", "4.000", "1.000", "5.00",
    ]  # fmt: skip


def test_the_pacing_fault_is_one_the_stub_takes_for_the_measured_calls():
    from stubvendor.control import _parse_fault

    fault = _parse_fault(pacing_fault(20.0, 300))

    assert isinstance(fault, dict)
    assert (fault["kind"], fault["delay_ms"], fault["times"]) == ("slow", 20.0, 300)
    assert not fault.get("match")  # every call, the gateway's and the bare proxy's alike
