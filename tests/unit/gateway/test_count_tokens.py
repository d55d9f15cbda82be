"""The count-tokens estimate: ceil(text bytes / 4) + 1,600 per image and per document page."""

from __future__ import annotations

import base64

import orjson
import pytest

from gateway.count_tokens import estimate_input_tokens, pdf_pages


def test_strings_count_their_utf8_bytes_over_four_rounded_up():
    body = {
        "model": "ignored-model-name",
        "system": "Be brief.",  # 9 bytes
        "messages": [
            {"role": "user", "content": "Hello there, gateway"},  # 20
            {"role": "assistant", "content": "Grüß dich"},  # 11: ü and ß take two bytes
        ],
    }

    assert estimate_input_tokens(body) == 10  # ceil(40 / 4)


def test_blocks_count_the_text_a_model_reads():
    tool_input = {"city": "Paris"}
    body = {
        "system": [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Weather?"},  # 8
                    {"type": "image", "source": {"type": "base64", "data": "aGVsbG8="}},
                ],
            },
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "Ask the tool", "signature": "x" * 99},
                    {"type": "tool_use", "id": "t1", "name": "weather", "input": tool_input},
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "t1",
                        "content": [{"type": "text", "text": "Sunny"}],
                    }
                ],
            },
        ],
    }
    text_bytes = 9 + 8 + len("Ask the tool") + len("weather") + len(orjson.dumps(tool_input)) + 5

    assert text_bytes == 57
    assert estimate_input_tokens(body) == 15 + 1_600  # ceil(57 / 4) + one image


def test_tools_and_unknown_blocks_count_as_their_compact_json():
    tool = {
        "name": "weather",
        "description": "Says the weather",
        "input_schema": {"type": "object"},
    }
    odd = {"type": "search_result", "title": "T", "source": "s"}
    body = {"messages": [{"role": "user", "content": [odd]}], "tools": [tool]}

    expected = len(orjson.dumps(tool)) + len(orjson.dumps(odd))
    assert estimate_input_tokens(body) == -(-expected // 4)


def pdf(pages: int) -> str:
    objects = b"".join(
        b"%d 0 obj << /Type /Page /Parent 2 0 R >> endobj\n" % n for n in range(pages)
    )
    return base64.b64encode(
        b"%PDF-1.4\n2 0 obj << /Type /Pages /Count 3 >> endobj\n" + objects
    ).decode()


@pytest.mark.parametrize(
    ("source", "tokens"),
    [
        ({"type": "base64", "media_type": "application/pdf", "data": pdf(3)}, 3 * 1_600),
        ({"type": "base64", "media_type": "application/pdf", "data": pdf(0)}, 1_600),
        ({"type": "url", "url": "https://example.invalid/a.pdf"}, 1_600),
        ({"type": "text", "media_type": "text/plain", "data": "twelve bytes"}, 3),
        ({"type": "content", "content": [{"type": "text", "text": "abcd"}]}, 1),
    ],
)
def test_documents_count_their_text_or_pages(source, tokens):
    body = {"messages": [{"role": "user", "content": [{"type": "document", "source": source}]}]}

    assert estimate_input_tokens(body) == tokens


def test_pdf_pages_are_its_page_objects_and_at_least_one():
    assert pdf_pages(pdf(5)) == 5
    assert pdf_pages("not base64 at all!") == 1


def test_empty_or_odd_bodies_count_zero_rather_than_fail():
    assert estimate_input_tokens({"messages": []}) == 0
    assert estimate_input_tokens({"messages": ["hi", 7, {"content": None}], "system": 3}) == 0
