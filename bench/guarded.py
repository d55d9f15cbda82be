"""Guardrails' cost: the gw loads again with a key that carries guardrails (``*-guarded``).

Used by ``bench/run.py`` when a ``-guarded`` scenario runs. At setup (``start``), after
``seed_demo``, one more key of the demo group is made and two guardrails are attached to it
(``SETUP_CODE``, through ``manage.py shell``): the operator's ``detectors`` guardrail with
every built-in kind (phase both, action flag) and the account's ``custom`` one with
``PATTERNS`` and ``WORDS`` (phase both, action redact). Neither matches the bench's prompt
nor the stub's answer, so every answer stays the stub's and the scenario measures what
checking costs: the prompt scanned by both before the plan, the answer by both after it
(whole, or as the stream passes, held back and released). The scenario then runs exactly
like its unguarded twin (``run.run_scenario``) on the same gateway, and the comparison sets
its gateway ``cpu/req`` and p50 against the twin's.

``python bench/guarded.py`` (what ``measure`` runs, in a child with the gateway's settings)
times in one process, with ``timeit`` on the CPU clock, what a request whose key, group and
account carry no guardrail runs for guardrails -- ``guard_input``, then ``guard_answer``
(whole answers) or ``answer_guard`` (streams): ``none_*_us``, microseconds per request --
and, for scale, the same with the two guardrails above (``guarded_whole_us``;
``guarded_stream_us``: the stub's stream of 8 words fed through the stream guard a chunk at a
time). It also scans the bench's prompt and the stub's answer with them
(``matches``: must be 0, or the guarded rows would measure something else).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import time
import timeit
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SUFFIX = "guarded"
KEY_NAME = "bench-guarded"
DETECTORS_NAME = "bench-detectors"
CUSTOM_NAME = "bench-custom"
# A tenant's kind of rules: ticket and account references, code words. None of them is in
# "Say hello to the benchmark" or "Hello from the stub model <model> reply ok".
PATTERNS = (r"PRJ-[0-9]{4}", r"ACCT-[A-Z]{2}[0-9]{8}", r"(?i)project\s+nightjar")
WORDS = ("falcon", "nightjar", "confidential", "internal only")
MEASURE_CALLS = 200_000
MEASURE_ROUNDS = 5

# Run by `manage.py shell -c` at setup: the guarded key and its two guardrails (a reused
# database's from an earlier run are deleted first: names are unique). Prints one JSON line.
SETUP_CODE = """
import json
from accounts.models import Group
from accounts.services import api_key_create
from guardrails import services
from guardrails.detectors import BUILTIN_KINDS
from guardrails.models import Guardrail
group = Group.objects.select_related("account").get(pk={group_id})
account = group.account
for old in Guardrail.objects.filter(account=None, name={detectors_name!r}):
    services.guardrail_delete(guardrail=old, by=services.OPERATOR)
for old in Guardrail.objects.filter(account=account, name={custom_name!r}):
    services.guardrail_delete(guardrail=old, by=services.OPERATOR)
key, secret = api_key_create(group=group, name={key_name!r})
detectors, _ = services.guardrail_create(
    account=None, name={detectors_name!r}, kind="detectors", detectors=list(BUILTIN_KINDS),
    phase="both", action="flag",
)
custom, _ = services.guardrail_create(
    account=account, name={custom_name!r}, kind="custom", patterns={patterns!r},
    words={words!r}, phase="both", action="redact",
)
services.attachment_create(guardrail=detectors, account=account, api_key=key, by="operator")
services.attachment_create(guardrail=custom, account=account, api_key=key, by="tenant")
print(json.dumps({{"guarded_api_key": secret}}))
"""


def start(servers: Any, env: dict[str, str], run_manage: Callable[..., str]) -> Any:
    """Make the guarded key with run.py's `run_manage`; return run.Servers sending it."""
    code = SETUP_CODE.format(
        group_id=int(servers.group_id),
        key_name=KEY_NAME,
        detectors_name=DETECTORS_NAME,
        custom_name=CUSTOM_NAME,
        patterns=list(PATTERNS),
        words=list(WORDS),
    )
    for line in run_manage(["shell", "-c", code], env).splitlines():
        if line.strip().startswith("{"):
            return dataclasses.replace(servers, api_key=json.loads(line)["guarded_api_key"])
    raise RuntimeError("the guarded key's setup printed no JSON line")


def measure(env: dict[str, str], prompt: str, model: str) -> dict[str, Any]:
    """Run this module in a child with the gateway's environment; return what it measured
    (or {"error": ...})."""
    done = subprocess.run(
        [sys.executable, str(Path(__file__)), "--prompt", prompt, "--model", model],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if done.returncode != 0:
        return {"error": f"bench/guarded.py failed ({done.returncode}): {done.stderr[-2000:]}"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def verdicts(gw_url: str) -> dict[str, float]:
    """The gateway's guardrail verdicts so far (tollgate_guardrail_verdicts_total), by
    "kind phase action result"."""
    from prometheus_client.parser import text_string_to_metric_families

    try:
        with urllib.request.urlopen(gw_url + "/metrics", timeout=10) as resp:  # noqa: S310
            text = resp.read().decode()
    except OSError:
        return {}  # the gateway is gone: its scenarios say so
    return {
        " ".join(s.labels[k] for k in ("kind", "phase", "action", "result")): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "tollgate_guardrail_verdicts_total"
    }


def problem(checked: dict[str, float] | None, unguarded: dict[str, Any] | None) -> str | None:
    """What makes the guarded rows measure something else, or None: a guardrail that matched
    (the prompt or the answer would not be the one checked), a failed measure."""
    matched = sorted(k for k, v in (checked or {}).items() if v and not k.endswith(" clean"))
    if matched:
        return f"guardrail verdicts other than clean: {', '.join(matched)}"
    if unguarded is not None and "error" in unguarded:
        return unguarded["error"]
    if unguarded is not None and unguarded["matches"]:
        return f"the bench guardrails match the prompt or answer {unguarded['matches']} time(s)"
    return None


def comparisons(results: list) -> list[dict[str, Any]]:
    """Each guarded scenario's gateway cpu/req and p50 against its unguarded twin's."""
    by_name = {r.name: r for r in results}
    rows = []
    for r in results:
        twin_name, _, suffix = r.name.rpartition("-")
        if suffix != SUFFIX:
            continue
        twin = by_name.get(twin_name)
        cpu, p50 = r.gateway_cpu_ms_per_req, r.p50_ms
        twin_cpu = twin.gateway_cpu_ms_per_req if twin else None
        twin_p50 = twin.p50_ms if twin else None
        rows.append(
            {
                "scenario": r.name,
                "twin": twin_name,
                "cpu_ms_per_req": cpu,
                "twin_cpu_ms_per_req": twin_cpu,
                "added_cpu_ms_per_req": _minus(cpu, twin_cpu),
                "p50_ms": p50,
                "twin_p50_ms": twin_p50,
                "added_p50_ms": _minus(p50, twin_p50),
            }
        )
    return rows


def _minus(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b


def _fmt(value: float | None, spec: str = ".3f") -> str:
    return "-" if value is None else format(value, spec)


def report(
    results: list, unguarded: dict[str, Any] | None, checked: dict[str, float] | None = None
) -> str:
    """The comparison rows, the gateway's verdicts and, when measured, what a request with no
    guardrail pays."""
    lines = []
    rows = comparisons(results)
    if rows:
        lines.append("Guardrails (gateway cpu/req and p50, ms): guarded vs its unguarded twin")
        for row in rows:
            lines.append(
                f"  {row['scenario']:<26} cpu/req {_fmt(row['cpu_ms_per_req'])} vs "
                f"{row['twin']} {_fmt(row['twin_cpu_ms_per_req'])}: "
                f"{_fmt(row['added_cpu_ms_per_req'], '+.3f')}; p50 {_fmt(row['p50_ms'], '.2f')}"
                f" vs {_fmt(row['twin_p50_ms'], '.2f')}: {_fmt(row['added_p50_ms'], '+.2f')}"
            )
    if checked is not None:
        lines.append(
            "  gateway verdicts (warm-ups included): "
            + (", ".join(f"{k} {v:g}" for k, v in sorted(checked.items())) or "none")
        )
    if unguarded and "error" in unguarded:
        lines.append(f"No guardrail attached: not measured: {unguarded['error']}")
    elif unguarded:
        by_name = {r.name: r for r in results}
        lines.append(
            "No guardrail attached (in one process, timeit, CPU per request): "
            f"{unguarded['none_whole_us']:.3f} us whole, {unguarded['none_stream_us']:.3f} us"
            " streamed"
        )
        for kind, twin in (("whole", "gw-openai"), ("stream", "gw-openai-stream")):
            plain = by_name.get(twin)
            if plain is not None and plain.gateway_cpu_ms_per_req:
                share = unguarded[f"none_{kind}_us"] / (plain.gateway_cpu_ms_per_req * 1000.0)
                lines.append(
                    f"  {kind}: {share:.4%} of {twin}'s {plain.gateway_cpu_ms_per_req:.3f} ms"
                    " cpu/req"
                )
        lines.append(
            f"  with the two bench guardrails: {unguarded['guarded_whole_us']:.1f} us whole,"
            f" {unguarded['guarded_stream_us']:.1f} us streamed; the bench prompt and the stub's"
            f" answer matched {unguarded['matches']} time(s)"
        )
    return "\n".join(lines)


# --------------------------------------------------------------------------- the child


def _per_call_us(fn: Callable[[], object], calls: int, rounds: int) -> float:
    """The least CPU per call over `rounds` rounds of `calls` calls, in microseconds."""
    timer = timeit.Timer(fn, timer=time.process_time)
    return min(timer.repeat(repeat=rounds, number=calls)) / calls * 1e6


def _child(prompt: str, model: str, calls: int, rounds: int) -> dict[str, Any]:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from datetime import UTC, datetime

    from gateway.auth import Principal
    from gateway.context import Meter, ModelContext
    from gateway.guard_output import answer_guard, guard_answer
    from gateway.guarding import guard_input, scan_texts
    from gateway.shapes.openai import chunk_from_vendor
    from gateway.shapes.texts import rewrite_answer_texts
    from gateway.types import OPENAI, Completion, ModelRequest, Usage
    from guardrails.detectors import BUILTIN_KINDS
    from guardrails.selectors import GuardrailSpec

    def spec(pk: int, name: str, kind: str, action: str, **rules: tuple) -> GuardrailSpec:
        base: dict[str, Any] = dict(
            id=pk, name=name, kind=kind, phase="both", action=action, detectors=(),
            patterns=(), words=(), moderation_model="", moderation_threshold=None,
            webhook_url="", webhook_secret="", deadline_ms=2000, fail_mode="open",
            updated_at=datetime(2026, 12, 7, tzinfo=UTC),
        )  # fmt: skip
        return GuardrailSpec(**(base | rules))

    specs = (
        spec(1, DETECTORS_NAME, "detectors", "flag", detectors=tuple(BUILTIN_KINDS)),
        spec(2, CUSTOM_NAME, "custom", "redact", patterns=PATTERNS, words=WORDS),
    )

    def context(*guardrails: GuardrailSpec) -> ModelContext:
        principal = Principal(
            account_id=1, billing_mode="prepaid", group_id=2, group_budget_max_micro=None,
            group_rpm=None, group_tpm=None, group_concurrency=None, bandwidth_micro_per_gb=0,
            api_key_id=3, guardrails=guardrails,
        )  # fmt: skip
        return ModelContext(request_id="r1", endpoint="chat", meter=Meter(), principal=principal)

    body = {"model": model, "messages": [{"role": "user", "content": prompt}], "max_tokens": 256}
    req = ModelRequest(model=model, shape=OPENAI, body=body)
    answer = f"Hello from the stub model {model} reply ok"
    data = {
        "id": "chatcmpl-1", "object": "chat.completion", "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": answer},
                     "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 6, "completion_tokens": 8, "total_tokens": 14},
    }  # fmt: skip
    completion = Completion(OPENAI, data, answer, "stop", Usage(6, 8), model)
    # The stub's stream: a role chunk, a chunk per word, the finish, the usage chunk.
    head = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": model}
    words = [word + " " for word in answer.split()]
    words[-1] = words[-1].rstrip()
    events: list[dict[str, Any]] = [
        {**head, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]},
        *({**head, "choices": [{"index": 0, "delta": {"content": w}, "finish_reason": None}]}
          for w in words),
        {**head, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
        {**head, "choices": [], "usage": {"prompt_tokens": 6, "completion_tokens": 8}},
    ]  # fmt: skip
    chunks = [chunk_from_vendor(event) for event in events]
    bare = context()

    def run_now(step: Any) -> Any:
        """Run a coroutine that never waits (no guardrail here calls out) to its end, as
        the event loop would: its whole cost, with no loop around it."""
        try:
            step.send(None)
        except StopIteration as done:
            return done.value
        raise RuntimeError("a guardrail check waited on something")

    def none_whole() -> None:
        run_now(guard_input(bare, req))
        run_now(guard_answer(bare, completion))

    def none_stream() -> None:
        run_now(guard_input(bare, req))
        answer_guard(bare)

    def guarded_whole() -> None:
        ctx = context(*specs)  # a fresh context each time: verdicts pile up on one
        run_now(guard_input(ctx, req))
        run_now(guard_answer(ctx, completion))

    def guarded_stream() -> None:
        ctx = context(*specs)
        run_now(guard_input(ctx, req))
        guard = answer_guard(ctx)
        assert guard is not None
        for chunk in chunks:  # each as it arrives
            guard.guard([chunk])
        guard.note(ctx)

    matches = sum(
        len(scan_texts(s, OPENAI, body)[1])
        + len(scan_texts(s, OPENAI, data, walk=rewrite_answer_texts)[1])
        for s in specs
    )
    made = _per_call_us(lambda: context(*specs), calls // 100, rounds)
    return {
        "calls": calls,
        "rounds": rounds,
        "none_whole_us": _per_call_us(none_whole, calls, rounds),
        "none_stream_us": _per_call_us(none_stream, calls, rounds),
        # less the context's own making, which a request pays with or without guardrails
        "guarded_whole_us": _per_call_us(guarded_whole, calls // 100, rounds) - made,
        "guarded_stream_us": _per_call_us(guarded_stream, calls // 100, rounds) - made,
        "matches": matches,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompt", default="Say hello to the benchmark")
    parser.add_argument("--model", default="gpt-4o-mini")
    parser.add_argument("--calls", type=int, default=MEASURE_CALLS)
    parser.add_argument("--rounds", type=int, default=MEASURE_ROUNDS)
    args = parser.parse_args()
    print(json.dumps(_child(args.prompt, args.model, args.calls, args.rounds)))


if __name__ == "__main__":
    main()
