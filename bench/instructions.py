"""Instructions per request: the gateway's work and the bare proxy's, counted, not timed.

    python bench/instructions.py [--n 300] [--only bare-openai,gw-openai,...]
        [--database-url URL --redis-url URL] [--keep] [--pace-ms MS]

CPU time per request moves with whatever else the host runs: on a shared machine the same
build reads 0.65 ms one hour and 1.1 ms the next, so a change worth a few percent cannot be
seen in `make bench`. valgrind's callgrind counts the user-space instructions a process
executes instead, and the count repeats to within half a percent on any load.

It starts bench/run.py's servers with the gateway and the bare proxy (bench/bare.py) under
`valgrind --tool=callgrind`, counting nothing until a scenario's warm-up is over, then runs
each scenario one request at a time (c=1: no batch depends on timing). Around the measured
requests it waits for the usage writer's flush, which runs every 4 s here rather than every
0.5 s (TOLLGATE_USAGE_FLUSH_MS), so its batches are tens of rows, not one or two, as under a
real load, and the rows of the measured requests are counted with them.

It prints, per scenario, millions of instructions per request: the whole process, the event
loop's thread (the request path) and the other threads (the usage writer's), and a gw-X
scenario's total over bare-X's. Kernel time (system calls) is not counted: a ratio here is
not the CPU ratio `make bench` reports, it says where user-space work went and whether a
change removed some. Under valgrind a request costs ~50x its usual time; 300 requests of
four scenarios take about two minutes. With --keep, callgrind's dumps stay in the temp dir it
names (`callgrind_annotate <pid>.out.<dump>-<thread>`: which C functions a thread ran).

A vendor's real stream sends its tokens apart, each a read of its own, where the stub sends
its whole answer at once. With --pace-ms the stub waits that long before each piece of the
measured streams (its `slow` fault): a streamed request's count then holds a read and a write
per piece, and the difference to an unpaced run, over the pieces, is what one arrival costs.
"""

from __future__ import annotations

import argparse
import functools
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_SCENARIOS = "bare-openai,gw-openai,bare-openai-stream,gw-openai-stream"
FLUSH_MS = 4000  # the counted gateway's usage flush: batches of tens of rows at this pace
START_TIMEOUT_S = 600.0  # Django's imports under valgrind take a while
LOOP_THREAD = 1  # callgrind numbers threads as created: the first is the event loop's
_DUMP = re.compile(r"^(\d+)\.out\.(\d+)-(\d+)$")  # <pid>.out.<dump>-<thread>


def valgrind(out_dir: Path) -> tuple[str, ...]:
    return (
        "valgrind",
        "--tool=callgrind",
        "--instr-atstart=no",  # the imports and the start-up are not counted
        "--separate-threads=yes",
        "--dump-instr=no",
        f"--callgrind-out-file={out_dir}/%p.out",
    )


def read_dump(out_dir: Path, pid: int) -> dict[int, int]:
    """Instructions per thread in `pid`'s newest dump (callgrind's `summary:` line)."""
    dumps: dict[int, dict[int, int]] = {}
    for path in out_dir.iterdir():
        match = _DUMP.match(path.name)
        if not match or int(match.group(1)) != pid:
            continue
        with path.open() as lines:
            total = next((int(line.split()[1]) for line in lines if line.startswith("summary:")), 0)
        dumps.setdefault(int(match.group(2)), {})[int(match.group(3))] = total
    return dumps[max(dumps)] if dumps else {}


def pacing_fault(pace_ms: float, times: int) -> dict:
    """The stub's fault that paces the next `times` calls: `pace_ms` before each piece."""
    return {"kind": "slow", "delay_ms": pace_ms, "times": times}


def queue_faults(stub_url: str, faults: list[dict]) -> None:
    """Queue faults on the stub (its control API) for the calls that come next."""
    request = urllib.request.Request(
        stub_url + "/_stub/faults",
        data=json.dumps({"faults": faults}).encode(),
        headers={"content-type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        if answer.status != 200:
            raise RuntimeError(f"POST /_stub/faults answered {answer.status}")


@dataclass
class Counter:
    """Run.py's `cost` for a process under callgrind: the first call (after a scenario's
    warm-up) starts counting from zero and returns 0; the second dumps and returns the
    millions of instructions in between. Each wait lets the usage writer flush first."""

    out_dir: Path
    settle_s: float = FLUSH_MS / 1000 + 1.5
    counting: set[int] = field(default_factory=set)
    threads: dict[int, dict[int, int]] = field(default_factory=dict)  # the last count, per pid
    on_start: Callable[[], None] | None = None  # run as counting starts (after the warm-up)

    def __call__(self, pid: int) -> float:
        time.sleep(self.settle_s)
        if pid not in self.counting:
            if self.on_start is not None:
                self.on_start()
            self._control(pid, "--zero")
            self._control(pid, "--instr=on")
            self.counting.add(pid)
            return 0.0
        self._control(pid, "--dump")
        self._control(pid, "--instr=off")
        self.counting.discard(pid)
        self.threads[pid] = read_dump(self.out_dir, pid)
        return sum(self.threads[pid].values()) / 1e6

    @staticmethod
    def _control(pid: int, what: str) -> None:
        subprocess.run(["callgrind_control", what, str(pid)], check=True, capture_output=True)


@dataclass(frozen=True)
class Row:
    name: str
    n: int
    per_request: dict[int, float]  # millions of instructions per request, by thread

    @property
    def total(self) -> float:
        return sum(self.per_request.values())

    @property
    def loop(self) -> float:
        return self.per_request.get(LOOP_THREAD, 0.0)


def table(rows: list[Row]) -> str:
    """Minstr per request, the event loop's and the other threads', and gw-X over bare-X."""
    totals = {row.name: row.total for row in rows}
    lines = [
        f"{'scenario':<28} {'n':>5} {'Minstr/req':>10} {'event loop':>10} {'others':>8}"
        f" {'gw / bare':>9}"
    ]
    for row in rows:
        floor = (
            totals.get(row.name.replace("gw-", "bare-", 1)) if row.name.startswith("gw-") else None
        )
        ratio = f"{row.total / floor:.2f}" if floor else "-"
        lines.append(
            f"{row.name:<28} {row.n:>5} {row.total:>10.3f} {row.loop:>10.3f}"
            f" {row.total - row.loop:>8.3f} {ratio:>9}"
        )
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[1])
    parser.add_argument("--n", type=int, default=300, help="requests per scenario (default 300)")
    parser.add_argument("--only", default=DEFAULT_SCENARIOS, help="gw-* and bare-* scenarios")
    parser.add_argument("--database-url", default=None)
    parser.add_argument("--redis-url", default=None)
    parser.add_argument(
        "--keep",
        action="store_true",
        help="keep the temp dir: callgrind's dumps, for callgrind_annotate",
    )
    parser.add_argument(
        "--pace-ms",
        type=float,
        default=0.0,
        help="the stub waits this long before each piece of a measured stream (default 0)",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    # The script's siblings (its directory is on the path when run), imported here so that
    # the reading and the table above import anywhere (tests/unit/bench).
    import bare  # bench/bare.py: the floor
    import run  # bench/run.py: the servers, the scenarios and their load

    own = parse_args(argv)
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        print("valgrind (with callgrind_control) is not installed", file=sys.stderr)
        return 2
    forwarded = ["--n", str(own.n), "--c", "1", "--only", own.only]
    for flag, value in (("--database-url", own.database_url), ("--redis-url", own.redis_url)):
        if value:
            forwarded += [flag, value]
    args = run.parse_args(forwarded)
    if any(
        sc.target not in ("gw", bare.TARGET) or sc.traced or sc.guarded for sc in args.scenarios
    ):
        print("only plain gw-* and bare-* scenarios are counted", file=sys.stderr)
        return 2
    tmp = Path(tempfile.mkdtemp(prefix="tollgate-instructions-"))
    counted = functools.partial(
        run.start_gateway,
        wrapper=valgrind(tmp),
        extra_env={"TOLLGATE_USAGE_FLUSH_MS": str(FLUSH_MS)},
        start_timeout_s=START_TIMEOUT_S,
    )
    counter = Counter(tmp)
    procs: list = []
    rows: list[Row] = []
    try:
        servers = run.setup(args, tmp, procs, start=counted)
        env = run.child_env(str(tmp / "var"), args.database_url, args.redis_url)
        floor = bare.start(env, servers, tmp, counted, run.FloorProc)
        procs.append(floor.gateway)
        for sc in args.scenarios:
            target = floor if sc.target == bare.TARGET else servers
            print(f"counting {sc.name} ...", flush=True)
            paced = bool(own.pace_ms) and sc.stream
            counter.on_start = (
                functools.partial(
                    queue_faults, servers.stub_url, [pacing_fault(own.pace_ms, own.n)]
                )
                if paced
                else None
            )
            result = run.run_loop(functools.partial(run.run_scenario, sc, target, args, counter))
            done = result.ok + result.failed
            if result.failed or not done:
                print(f"  {result.failed} of {done} failed: {dict(result.failure_kinds)}")
                return 1
            threads = counter.threads.get(target.gateway.pid, {})
            name = f"{sc.name} paced" if paced else sc.name
            rows.append(Row(name, done, {t: i / 1e6 / done for t, i in threads.items()}))
    except (RuntimeError, subprocess.SubprocessError, OSError) as exc:
        return run.setup_failed(exc, procs)
    finally:
        run.stop_all(procs, tmp, keep=own.keep)
    print()
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
