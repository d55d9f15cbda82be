"""Output guardrails on an answer: a whole answer is rewritten in its vendor's shape, and a
stream, in each vendor shape and however it is cut into pieces, gives the client exactly the
text a scan of the whole answer gives, in valid events, and says when it did not see it all."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from core.errors import GuardrailBlocked
from gateway.context import Meter, ModelContext
from gateway.guard_output import AnswerGuard, guard_answer, output_guardrails
from gateway.shapes import anthropic as anthropic_shape
from gateway.shapes import openai as openai_shape
from gateway.shapes import responses as responses_shape
from gateway.types import Completion, Usage
from guardrails.selectors import GuardrailSpec
from tests.unit.gateway.test_cache_rules import in_a_loop, principal

PROJECT = "PRJ-1234"
ANSWER = (
    "Your ticket is filed under " + PROJECT + " and the falcon team owns it; "
    + "we will write back soon. " * 20  # long enough to pass the hold-back
    + "Ref " + PROJECT + "."
)  # fmt: skip
REDACTED = ANSWER.replace(PROJECT, "[REDACTED:custom]")


def spec(
    action: str, *, name: str = "projects", phase: str = "output", **fields: Any
) -> GuardrailSpec:
    base: dict[str, Any] = dict(
        id=hash(name) % 1000,
        name=name,
        kind="custom",
        phase=phase,
        action=action,
        detectors=(),
        patterns=(r"PRJ-[0-9]{4}",),
        words=(),
        moderation_model="",
        moderation_threshold=None,
        webhook_url="",
        webhook_secret="",
        deadline_ms=2000,
        fail_mode="open",
        updated_at=datetime(2026, 12, 7, tzinfo=UTC),
    )
    return GuardrailSpec(**(base | fields))


def context(*specs: GuardrailSpec) -> ModelContext:
    return ModelContext(
        request_id="r1", endpoint="chat", meter=Meter(), principal=principal(guardrails=specs)
    )


def pieces(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def openai_events(text: str, size: int) -> list[dict]:
    head = {"id": "c1", "object": "chat.completion.chunk", "model": "m"}
    first = {**head, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}
    deltas = [
        {**head, "choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}]}
        for piece in pieces(text, size)
    ]
    last = {**head, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
    usage = {**head, "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 9}}
    return [first, *deltas, last, usage]


def anthropic_events(text: str, size: int) -> list[tuple[str, dict]]:
    deltas = [
        ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                 "delta": {"type": "text_delta", "text": piece}})
        for piece in pieces(text, size)
    ]  # fmt: skip
    return [
        ("message_start", {"type": "message_start", "message": {"usage": {"input_tokens": 3}}}),
        ("content_block_start", {"type": "content_block_start", "index": 0,
                                 "content_block": {"type": "text", "text": ""}}),
        *deltas,
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn"},
                           "usage": {"output_tokens": 9}}),
    ]  # fmt: skip


def responses_events(text: str, size: int) -> list[dict]:
    at = {"item_id": "msg_1", "output_index": 0, "content_index": 0}
    part = {"type": "output_text", "text": text, "annotations": []}
    item = {"id": "msg_1", "type": "message", "role": "assistant", "content": [part]}
    events: list[dict] = [{"type": "response.created", "response": {"id": "r", "output": []}}]
    events += [
        {"type": "response.output_text.delta", **at, "delta": piece} for piece in pieces(text, size)
    ]
    events += [
        {"type": "response.output_text.done", **at, "text": text},
        {"type": "response.content_part.done", **at, "part": part},
        {"type": "response.output_item.done", "output_index": 0, "item": item},
        {"type": "response.completed", "response": {"id": "r", "output": [item],
                                                    "usage": {"input_tokens": 3,
                                                              "output_tokens": 9}}},
    ]  # fmt: skip
    return [{**event, "sequence_number": n} for n, event in enumerate(events)]


def chunks_of(shape: str, text: str, size: int):
    if shape == "openai":
        return [openai_shape.chunk_from_vendor(event) for event in openai_events(text, size)]
    if shape == "anthropic":
        return [anthropic_shape.chunk_from_event(n, e) for n, e in anthropic_events(text, size)]
    return [responses_shape.chunk_from_vendor(event) for event in responses_events(text, size)]


def event_text(shape: str, event: dict) -> str:
    if shape == "openai":
        return "".join((c.get("delta") or {}).get("content") or "" for c in event["choices"])
    if shape == "anthropic":
        return (event.get("delta") or {}).get("text") or ""
    return event["delta"] if event["type"] == "response.output_text.delta" else ""


def label(event: dict) -> str:
    """An event that is not text, by what it is (a Responses closing event is rewritten)."""
    return event.get("type") or str(event)


def run(guard: AnswerGuard, chunks: list, batch: int = 1) -> list:
    out = []
    for start in range(0, len(chunks), batch):
        out += guard.guard(chunks[start : start + batch])
        if guard.blocked is not None:
            break
    return out


@pytest.mark.parametrize("shape", ["openai", "anthropic", "responses"])
@pytest.mark.parametrize("size", [1, 3, 17, 400])
def test_a_redacted_stream_sends_exactly_the_redacted_answer_in_its_vendors_events(shape, size):
    guard = AnswerGuard(context(), [spec("redact")])
    chunks = chunks_of(shape, ANSWER, size)

    out = run(guard, chunks, batch=2)

    # The text events carry the redacted answer, and their Chunk.text says the same.
    texts = [event_text(shape, chunk.event) for chunk in out]
    assert "".join(texts) == "".join(chunk.text for chunk in out) == REDACTED
    # The events that are not text pass in order, after the text they follow.
    kept = [label(c.event) for c in chunks if not c.text]
    assert [label(c.event) for c in out if not c.text and label(c.event) in kept] == kept
    last_text = max(i for i, chunk in enumerate(out) if chunk.text)
    first_end = min(i for i, c in enumerate(out) if label(c.event) in kept[-2:])
    assert last_text < first_end
    assert [v.as_json() for v in guard.verdicts()] == [
        {"guardrail": "projects", "phase": "output", "action": "redact", "matches": 2}
    ]
    if shape == "responses":  # the closing events repeat the text the client got
        closing = {c.event["type"]: c.event for c in out}
        assert closing["response.output_text.done"]["text"] == REDACTED
        assert closing["response.content_part.done"]["part"]["text"] == REDACTED
        assert closing["response.output_item.done"]["item"]["content"][0]["text"] == REDACTED
        [item] = closing["response.completed"]["response"]["output"]
        assert item["content"][0]["text"] == REDACTED


@pytest.mark.parametrize("shape", ["openai", "anthropic", "responses"])
def test_a_blocked_stream_sends_only_the_text_before_the_value(shape):
    # The flagging guardrail comes after the blocking one: it sees only what the block let by.
    guard = AnswerGuard(context(), [spec("block", name="second"), spec("flag", name="first")])

    out = run(guard, chunks_of(shape, ANSWER, 5))

    assert "".join(chunk.text for chunk in out) == ANSWER[: ANSWER.index(PROJECT)]
    assert guard.blocked is not None
    assert str(guard.error().message) == (
        "Blocked by guardrail 'second' (output): it found 1 value of kind custom."
    )
    assert [v.as_json() for v in guard.verdicts()] == [
        {"guardrail": "second", "phase": "output", "action": "block", "matches": 1},
        {"guardrail": "first", "phase": "output", "action": "flag", "matches": 0},
    ]


def test_a_stream_cut_before_its_end_is_never_recorded_as_passed():
    ctx = context(spec("flag"))
    guard = AnswerGuard(ctx, output_guardrails(ctx))
    chunks = chunks_of("openai", "clean words only. " * 40, 7)

    out = run(guard, chunks[: len(chunks) // 2])  # the vendor, or the client, went away
    guard.note(ctx)

    sent = "".join(chunk.text for chunk in out)
    assert sent and len(sent) < len("clean words only. " * 20)  # the tail stayed held
    assert [v.as_json() for v in ctx.guardrail_verdicts] == [
        {"guardrail": "projects", "phase": "output", "action": "flag", "matches": 0,
         "complete": False}
    ]  # fmt: skip
    assert not ctx.answer_rewritten


def test_an_unchanged_stream_passes_the_vendors_own_events():
    guard = AnswerGuard(context(), [spec("redact")])
    chunks = chunks_of("openai", "short and clean", 400)

    out = run(guard, chunks, batch=10)

    # One text event, held until the answer ended, then sent as it came.
    assert [chunk.event for chunk in out] == [chunk.event for chunk in chunks]


def test_input_only_guardrails_do_not_check_the_answer():
    ctx = context(spec("block", phase="input"), spec("flag", name="both", phase="both"))
    assert [s.name for s in output_guardrails(ctx)] == ["both"]
    assert output_guardrails(context()) == ()


def completion(shape: str, text: str) -> Completion:
    data: dict[str, Any]
    if shape == "openai":
        data = {"choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                             "finish_reason": "stop"}]}  # fmt: skip
        return openai_shape.completion_from_vendor(data, model="m")
    if shape == "anthropic":
        data = {"content": [{"type": "text", "text": text}, {"type": "tool_use", "id": "t"}],
                "stop_reason": "end_turn"}  # fmt: skip
        return anthropic_shape.completion_from_vendor(data, model="m")
    message = {"type": "message", "content": [{"type": "output_text", "text": text}]}
    data = {"output": [{"type": "reasoning", "summary": []}, message]}
    return responses_shape.completion_from_vendor(data, model="m")


@pytest.mark.parametrize("shape", ["openai", "anthropic", "responses"])
@in_a_loop
async def test_a_whole_answer_is_redacted_in_its_vendors_shape(shape):
    ctx = context(spec("redact"), spec("flag", name="falcons", patterns=(), words=("falcon",)))
    given = completion(shape, ANSWER)

    answered = await guard_answer(ctx, replace_usage(given))

    assert answered.text == REDACTED
    assert answered.data == completion(shape, REDACTED).data  # tool use, reasoning kept
    assert answered.usage == Usage(input_tokens=3, output_tokens=9)
    assert [v.as_json() for v in ctx.guardrail_verdicts] == [
        {"guardrail": "projects", "phase": "output", "action": "redact", "matches": 2},
        {"guardrail": "falcons", "phase": "output", "action": "flag", "matches": 1},
    ]
    assert ctx.answer_rewritten
    assert given.text == ANSWER  # the vendor's answer itself is not changed


def replace_usage(c: Completion) -> Completion:
    from dataclasses import replace

    return replace(c, usage=Usage(input_tokens=3, output_tokens=9))


@in_a_loop
async def test_a_blocked_whole_answer_names_the_guardrail_never_the_value():
    ctx = context(spec("block"))

    with pytest.raises(GuardrailBlocked) as blocked:
        await guard_answer(ctx, completion("anthropic", ANSWER))

    assert blocked.value.message == (
        "Blocked by guardrail 'projects' (output): it found 2 values of kind custom."
    )
    assert PROJECT not in blocked.value.message
    assert ctx.answer_rewritten


@in_a_loop
async def test_a_clean_whole_answer_is_the_same_object():
    ctx = context(spec("redact"))
    given = completion("openai", "nothing to see")
    assert await guard_answer(ctx, given) is given
    assert [v.matches for v in ctx.guardrail_verdicts] == [0]


@in_a_loop
async def test_a_stream_that_ends_on_a_text_event_still_sends_what_was_held():
    guard = AnswerGuard(context(), [spec("redact")])
    texts = [c for c in chunks_of("openai", ANSWER, 9) if c.text]  # no end event at all

    async def vendor():
        for chunk in texts:
            yield [chunk]

    out = [chunk async for arrived in guard.checked(vendor()) for chunk in arrived]

    assert "".join(chunk.text for chunk in out) == REDACTED
    assert [v.complete for v in guard.verdicts()] == [True]


@in_a_loop
async def test_a_block_closes_the_vendors_stream_then_raises():
    guard = AnswerGuard(context(), [spec("block")])
    closed = []

    async def vendor():
        try:
            for chunk in chunks_of("anthropic", ANSWER, 9):
                yield [chunk]
        finally:
            closed.append(True)

    out = []
    with pytest.raises(GuardrailBlocked):
        async for arrived in guard.checked(vendor()):
            out += arrived

    assert "".join(chunk.text for chunk in out) == ANSWER[: ANSWER.index(PROJECT)]
    assert closed == [True]


@in_a_loop
async def test_an_answer_with_no_text_is_not_checked():
    ctx = context(spec("block", patterns=(".",)))  # would match any text at all
    vectors = Completion("embeddings", {"data": [{"embedding": [0.1]}]}, "", "stop", Usage(), "m")

    assert await guard_answer(ctx, vectors) is vectors
    assert ctx.guardrail_verdicts == ()
