"""Translate a whole chat-completions answer into an OpenAI Responses API `response` object
(the request went through responses_requests.py; streams: responses_streams.py).

- An answer comes from a vendor asked with a translated request, so what it cannot hold (a
  custom tool call, a tool call without an id) raises ValueError: the vendor broke the
  contract, not the client.
- Item ids are made from the response id: `msg_<id>` for the message, `fc_<id>_<n>` for the
  n-th call. An answer is one message (its text, then any refusal) followed by its calls, the
  order chat vendors send them in.
- `finish_reason: "length"` is status `incomplete` with reason `max_output_tokens`, and
  `content_filter` is `incomplete` with reason `content_filter`; the last output item, the one
  the vendor stopped in, is `incomplete` too.
"""

from __future__ import annotations

import time

from gateway.shapes.fields import cannot_arrive

# ---------------------------------------------------------------- answers: chat -> Responses

INCOMPLETE_REASONS = {"length": "max_output_tokens", "content_filter": "content_filter"}


def usage_from_chat(usage: dict) -> dict:
    """Return Responses usage for chat `CompletionUsage`; a count the vendor left out is 0."""
    prompt = usage.get("prompt_tokens") or 0
    completion = usage.get("completion_tokens") or 0
    prompt_details = usage.get("prompt_tokens_details") or {}
    completion_details = usage.get("completion_tokens_details") or {}
    return {
        "input_tokens": prompt,
        "input_tokens_details": {
            "cached_tokens": prompt_details.get("cached_tokens") or 0,
            # The SDK's type requires it; OpenAI-compatible vendors report it in the details.
            "cache_write_tokens": prompt_details.get("cache_write_tokens") or 0,
        },
        "output_tokens": completion,
        "output_tokens_details": {
            "reasoning_tokens": completion_details.get("reasoning_tokens") or 0
        },
        "total_tokens": usage.get("total_tokens") or prompt + completion,
    }


def chat_completion_to_response(data: dict, *, response_id: str, model: str, request: dict) -> dict:
    """Return the Responses API `response` object for a chat.completion (choices[0] only: the
    translated request asks for one); raise ValueError for what it cannot hold."""
    choices = data.get("choices") or []
    if not choices:
        raise ValueError("A chat.completion without choices has no Responses output.")
    choice = choices[0]
    message = choice.get("message") or {}
    content: list[dict] = []
    if message.get("content"):
        logprobs = output_logprobs((choice.get("logprobs") or {}).get("content"))
        content.append(output_text_part(message["content"], logprobs))
    if message.get("refusal"):
        content.append(refusal_part(message["refusal"]))
    output = [output_message(f"msg_{response_id}", content, "completed")] if content else []
    for index, call in enumerate(message.get("tool_calls") or []):
        if call.get("type", "function") != "function":
            raise cannot_arrive(f"A chat {call.get('type')!r} tool call")
        function = call.get("function") or {}
        output.append(
            output_function_call(
                f"fc_{response_id}_{index}",
                call_id=call_id_of(call),
                name=function.get("name") or "",
                arguments=function.get("arguments") or "",
                status="completed",
            )
        )
    status, incomplete = outcome(choice.get("finish_reason"))
    if output and status == "incomplete":
        output[-1]["status"] = "incomplete"  # the item the vendor stopped in
    return response_object(
        response_id=response_id,
        model=model,
        request=request,
        created_at=data.get("created") or int(time.time()),
        status=status,
        output=output,
        usage=usage_from_chat(data.get("usage") or {}),
        incomplete_details=incomplete,
    )


def outcome(finish_reason: str | None) -> tuple[str, dict | None]:
    reason = INCOMPLETE_REASONS.get(finish_reason or "")
    return ("incomplete", {"reason": reason}) if reason else ("completed", None)


def call_id_of(call: dict) -> str:
    if not call.get("id"):
        raise ValueError("A chat tool call without an id cannot become a function_call.")
    return call["id"]


def response_object(
    *,
    response_id: str,
    model: str,
    request: dict,
    created_at: int,
    status: str,
    output: list[dict],
    usage: dict | None,
    incomplete_details: dict | None = None,
    error: dict | None = None,
) -> dict:
    """Build a response object: the answer, and the request's settings echoed as the SDK's
    `Response` type expects them (with the API's defaults for those not sent)."""
    return {
        "id": response_id,
        "object": "response",
        "created_at": created_at,
        "status": status,
        "error": error,
        "incomplete_details": incomplete_details,
        "model": model,
        "output": output,
        "usage": usage,
        "instructions": request.get("instructions"),
        "tools": request.get("tools") or [],
        "tool_choice": request.get("tool_choice") or "auto",
        "parallel_tool_calls": request.get("parallel_tool_calls") is not False,
        "temperature": request.get("temperature"),
        "top_p": request.get("top_p"),
        "max_output_tokens": request.get("max_output_tokens"),
        "metadata": request.get("metadata") or {},
        "text": {"format": {"type": "text"}, **(request.get("text") or {})},
        "reasoning": {"effort": None, "summary": None, **(request.get("reasoning") or {})},
        "store": False,
        "truncation": "disabled",
        "previous_response_id": None,
        "user": None,
    }


def output_message(item_id: str, content: list[dict], status: str) -> dict:
    return {
        "type": "message",
        "id": item_id,
        "status": status,
        "role": "assistant",
        "content": content,
    }


def output_text_part(text: str, logprobs: list[dict]) -> dict:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": logprobs}


def refusal_part(refusal: str) -> dict:
    return {"type": "refusal", "refusal": refusal}


def output_function_call(
    item_id: str, *, call_id: str, name: str, arguments: str, status: str
) -> dict:
    return {
        "type": "function_call",
        "id": item_id,
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        "status": status,
    }


def _token_bytes(entry: dict) -> list[int]:
    # Chat may leave `bytes` out; the Responses part requires it, and it is the token's UTF-8.
    value = entry.get("bytes")
    return value if value is not None else list(entry["token"].encode())


def output_logprobs(entries: list[dict] | None) -> list[dict]:
    """Return chat token logprobs as an output_text part holds them (bytes included)."""
    return [
        {
            "token": entry["token"],
            "bytes": _token_bytes(entry),
            "logprob": entry["logprob"],
            "top_logprobs": [
                {"token": top["token"], "bytes": _token_bytes(top), "logprob": top["logprob"]}
                for top in entry.get("top_logprobs") or []
            ],
        }
        for entry in entries or []
    ]


def event_logprobs(entries: list[dict]) -> list[dict]:
    """Return token logprobs as the text delta and done events hold them (no bytes)."""
    return [
        {
            "token": entry["token"],
            "logprob": entry["logprob"],
            "top_logprobs": [
                {"token": top["token"], "logprob": top["logprob"]}
                for top in entry.get("top_logprobs") or []
            ],
        }
        for entry in entries
    ]
