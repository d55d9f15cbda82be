"""What a stream cut before its end is billed (gateway/types.py `StreamResult`): one output
token per generated chunk written to the client, the prompt as the vendor told it or its
bound. The pipeline folds each chunk as it arrives and says `delivered()` after a write the
client was there for; a chunk that arrived after the client left is folded, never sent, and
not billed."""

from __future__ import annotations

from gateway.types import Chunk, StreamResult, Usage

TOKEN = Chunk(text="x", generated=True)
OPENING = Chunk(event={"role": "assistant"})  # no generated output: never billed


def test_only_the_chunks_written_to_the_client_are_its_output():
    result = StreamResult(prompt_tokens_estimate=27)
    for chunk in (OPENING, TOKEN, TOKEN):
        result.fold(chunk)
    result.delivered()  # the first write: the opening and two tokens
    result.fold(TOKEN)
    result.delivered()
    result.fold(TOKEN)  # arrived after the client left: folded, not written

    assert result.billed_usage() == Usage(input_tokens=27, output_tokens=3)


def test_the_vendors_own_prompt_count_beats_the_bound():
    result = StreamResult(prompt_tokens_estimate=27)
    result.fold(Chunk(usage=Usage(input_tokens=2, output_tokens=1)))  # Anthropic's message_start
    for _ in range(3):
        result.fold(TOKEN)
        result.delivered()

    assert result.billed_usage() == Usage(input_tokens=2, output_tokens=3)


def test_a_stream_the_vendor_finished_is_billed_its_usage():
    result = StreamResult(prompt_tokens_estimate=27)
    for _ in range(3):
        result.fold(TOKEN)
        result.delivered()
    result.fold(Chunk(finish_reason="stop", usage=Usage(input_tokens=2, output_tokens=8)))
    result.finished = True

    assert result.billed_usage() == Usage(input_tokens=2, output_tokens=8)
