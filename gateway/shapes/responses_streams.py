"""Translate a chat-completions chunk stream into the OpenAI Responses API's stream events.

The items and ids are those of a whole answer (responses_answers.py). A stream sending text
after a call gets it in a message after the call, `msg_<id>_<output index>` if the answer had
a message already; one the vendor cut short ends in `response.incomplete`. A fragment of a
call already finished raises ValueError: the vendor broke the contract, not the client.
"""

from __future__ import annotations

import copy
import time
from typing import Any

from gateway.shapes.fields import cannot_arrive
from gateway.shapes.responses_answers import (
    call_id_of,
    event_logprobs,
    outcome,
    output_function_call,
    output_logprobs,
    output_message,
    output_text_part,
    refusal_part,
    response_object,
    usage_from_chat,
)

# ---------------------------------------------------------------- streams


class ChatStreamToResponses:
    """Turn a chat-completion chunk stream, chunk by chunk, into Responses stream events.

    Items open and close in order, one at a time, as the official SDK's accumulator wants:
    an item's events carry its `output_index` and `item_id`, and the final response holds
    every item under the same identity. The final response is what chat_completion_to_response
    returns for the same answer (but for `created_at`).
    """

    def __init__(self, *, response_id: str, model: str, request: dict) -> None:
        self._response_id = response_id
        self._model = model
        self._request = request
        self._sequence = 0
        self._created_at: int | None = None
        self._output: list[dict] = []  # every item so far, as the final response holds it
        self._open: dict | None = None  # the last item of _output while it is still open
        self._part: dict | None = None  # the open content part of the open message
        self._messages = 0
        self._call_ids: dict[int, str] = {}  # chat tool index -> call id
        self._open_tool: int | None = None  # the chat tool index the open item carries
        self._finish_reason: str | None = None
        self._usage: dict[str, Any] = {}

    def feed(self, chunk: dict) -> list[dict]:
        """Return the Responses stream events one chat.completion.chunk becomes; the first
        chunk also starts the response."""
        events = self._start(chunk)
        if chunk.get("usage"):
            self._usage = chunk["usage"]
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            if delta.get("content"):
                logprobs = (choice.get("logprobs") or {}).get("content") or []
                events += self._on_text(delta["content"], logprobs)
            if delta.get("refusal"):
                events += self._on_refusal(delta["refusal"])
            for call in delta.get("tool_calls") or []:
                events += self._on_tool_call(call)
            if choice.get("finish_reason"):
                self._finish_reason = choice["finish_reason"]
        return events

    def finish(self) -> list[dict]:
        """Return the closing events once the chat stream ended: the open part and item done,
        then `response.completed`, or `response.incomplete`, with the whole response."""
        events = self._start({})
        status, incomplete = outcome(self._finish_reason)
        events += self._close_item(status)
        response = self._snapshot(status, usage=usage_from_chat(self._usage))
        response["incomplete_details"] = incomplete
        events.append(self._event(f"response.{status}", response=response))
        return events

    def _event(self, kind: str, **fields: Any) -> dict:
        event = {"type": kind, "sequence_number": self._sequence, **fields}
        self._sequence += 1
        return event

    def _snapshot(self, status: str, *, usage: dict | None) -> dict:
        return response_object(
            response_id=self._response_id,
            model=self._model,
            request=self._request,
            created_at=self._created_at or int(time.time()),
            status=status,
            output=copy.deepcopy(self._output),
            usage=usage,
        )

    def _start(self, chunk: dict) -> list[dict]:
        if self._created_at is not None:
            return []
        self._created_at = chunk.get("created") or int(time.time())
        return [
            self._event("response.created", response=self._snapshot("in_progress", usage=None)),
            self._event("response.in_progress", response=self._snapshot("in_progress", usage=None)),
        ]

    def _where(self) -> dict[str, Any]:
        """Return the fields naming the open item in its events."""
        assert self._open is not None
        return {"item_id": self._open["id"], "output_index": len(self._output) - 1}

    def _add_item(self, item: dict) -> list[dict]:
        events = self._close_item("completed")
        self._output.append(item)
        self._open = item
        events.append(
            self._event(
                "response.output_item.added",
                output_index=len(self._output) - 1,
                item=copy.deepcopy(item),
            )
        )
        return events

    def _close_item(self, status: str) -> list[dict]:
        item = self._open
        if item is None:
            return []
        events = self._close_part()
        if item["type"] == "function_call":
            # `name` is not in the SDK's type, but the API sends it and the SDK keeps extras.
            events.append(
                self._event(
                    "response.function_call_arguments.done",
                    **self._where(),
                    arguments=item["arguments"],
                    name=item["name"],
                )
            )
        item["status"] = status
        events.append(
            self._event(
                "response.output_item.done",
                output_index=len(self._output) - 1,
                item=copy.deepcopy(item),
            )
        )
        self._open = self._part = self._open_tool = None
        return events

    def _open_part(self, part: dict) -> list[dict]:
        """Open a content part of `part`'s type, in the open message or in a new one, unless
        one of that type is open already."""
        events: list[dict] = []
        if self._open is None or self._open["type"] != "message":
            index = len(self._output)
            suffix = f"_{index}" if self._messages else ""
            self._messages += 1
            events += self._add_item(
                output_message(f"msg_{self._response_id}{suffix}", [], "in_progress")
            )
        elif self._part is not None and self._part["type"] == part["type"]:
            return events
        events += self._close_part()
        assert self._open is not None
        self._open["content"].append(part)
        self._part = part
        events.append(
            self._event(
                "response.content_part.added",
                **self._where(),
                content_index=len(self._open["content"]) - 1,
                part=copy.deepcopy(part),
            )
        )
        return events

    def _close_part(self) -> list[dict]:
        part = self._part
        if part is None or self._open is None:
            return []
        where = {**self._where(), "content_index": len(self._open["content"]) - 1}
        if part["type"] == "output_text":
            done = self._event(
                "response.output_text.done",
                **where,
                text=part["text"],
                logprobs=event_logprobs(part["logprobs"]),
            )
        else:
            done = self._event("response.refusal.done", **where, refusal=part["refusal"])
        self._part = None
        return [
            done,
            self._event("response.content_part.done", **where, part=copy.deepcopy(part)),
        ]

    def _on_text(self, text: str, logprobs: list[dict]) -> list[dict]:
        events = self._open_part(output_text_part("", []))
        assert self._open is not None and self._part is not None
        self._part["text"] += text
        self._part["logprobs"] += output_logprobs(logprobs)
        events.append(
            self._event(
                "response.output_text.delta",
                **self._where(),
                content_index=len(self._open["content"]) - 1,
                delta=text,
                logprobs=event_logprobs(logprobs),
            )
        )
        return events

    def _on_refusal(self, refusal: str) -> list[dict]:
        events = self._open_part(refusal_part(""))
        assert self._open is not None and self._part is not None
        self._part["refusal"] += refusal
        events.append(
            self._event(
                "response.refusal.delta",
                **self._where(),
                content_index=len(self._open["content"]) - 1,
                delta=refusal,
            )
        )
        return events

    def _on_tool_call(self, call: dict) -> list[dict]:
        """Return the events of one tool-call fragment: the first opens a function_call item
        (closing what was open), the others add to its arguments.

        Raises ValueError for a call without an id, one of another type than function, or a
        fragment of a call that is no longer the open one (chat sends one after the other).
        """
        tool = call.get("index", 0)
        function = call.get("function") or {}
        call_id = call.get("id")
        # Some OpenAI-compatible vendors repeat the id on every fragment: a new call is a new
        # index, or a new id at a known one.
        starts = tool not in self._call_ids or (call_id and call_id != self._call_ids[tool])
        events: list[dict] = []
        if starts:
            if call.get("type", "function") not in (None, "function"):
                raise cannot_arrive(f"A chat {call.get('type')!r} tool call")
            self._call_ids[tool] = call_id_of(call)
            calls = sum(item["type"] == "function_call" for item in self._output)
            item = output_function_call(
                f"fc_{self._response_id}_{calls}",
                call_id=self._call_ids[tool],
                name=function.get("name") or "",
                arguments="",
                status="in_progress",
            )
            events += self._add_item(item)
            self._open_tool = tool
        elif tool != self._open_tool:
            raise ValueError("A chat tool call's fragment arrived after another item began.")
        assert self._open is not None
        if not self._open["name"] and function.get("name"):
            self._open["name"] = function["name"]
        if function.get("arguments"):
            self._open["arguments"] += function["arguments"]
            events.append(
                self._event(
                    "response.function_call_arguments.delta",
                    **self._where(),
                    delta=function["arguments"],
                )
            )
        return events
