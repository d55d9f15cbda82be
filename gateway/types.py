"""Tollgate's own request / response / chunk values, shared by every shape and adapter.

A request keeps the client's body in the client's shape (`ModelRequest.body`): on a
same-shape route it goes to the vendor as it came, but for the fields Tollgate owns; across
shapes it is translated (gateway/shapes/requests_to_*.py, responses_requests.py). Answers and
stream events likewise keep the vendor's own JSON (`Completion.data`, `Chunk.event`) beside
what Tollgate reads from them (text, finish reason, usage).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

# The request shapes (each an API's body): what a client sends and what a vendor serves.
OPENAI = "openai"  # OpenAI chat completions
ANTHROPIC = "anthropic"  # Anthropic messages
RESPONSES = "responses"  # OpenAI's Responses API
EMBEDDINGS = "embeddings"  # OpenAI's embeddings API
MODERATIONS = "moderations"  # OpenAI's moderations API


@dataclass(frozen=True, slots=True)
class ModelRequest:
    model: str
    shape: str  # OPENAI, ANTHROPIC, RESPONSES, EMBEDDINGS or MODERATIONS: `body`'s
    body: dict[str, Any]  # the client's body; owned fields are set again for each vendor
    chain: tuple[str, ...] = ()  # the client's chain: model, then its route list
    max_tokens: int | None = None
    n: int = 1  # answers asked for: the hold covers each
    stream: bool = False
    include_usage: bool = False  # the OpenAI client asked for a streamed usage chunk
    caller_id: str | None = None  # raw end-user id: never logged, forwarded or stored
    prompt_bytes: int = 0  # bytes of every text the prompt carries (tools included)
    prompt_parts: int = 1  # messages and other prompt pieces, each costing a few tokens
    media: int = 0  # images and documents: each bounded by a fixed token count
    unknown: tuple[str, ...] = ()  # top-level fields neither owned nor known (passthrough)
    # A field the vendor bills beyond tokens (a server tool, a dearer tier): no price of
    # ours covers it, so only team keys serve it.
    surcharged: str | None = None
    # The body's own tags (`metadata.tags`, taken out of `body`): unchecked until
    # gateway/tags.py applies the rules to them with the header's.
    tags: tuple[str, ...] = ()

    @property
    def embeds(self) -> bool:
        """Say whether this asks for embeddings (an embedding model, no output tokens)."""
        return self.shape == EMBEDDINGS

    @property
    def moderates(self) -> bool:
        """Say whether this asks for a moderation (a moderation model, no output tokens)."""
        return self.shape == MODERATIONS

    @property
    def outputs(self) -> bool:
        """Say whether the answer has output tokens (neither embeddings nor moderations do)."""
        return self.shape not in (EMBEDDINGS, MODERATIONS)


def texts_of(body: dict[str, Any]) -> list[str]:
    """Return the text of a body's system prompt and messages (either shape)."""
    texts: list[str] = []
    system = body.get("system")
    for content in [system, *(m.get("content") for m in body.get("messages") or ())]:
        if isinstance(content, str):
            texts.append(content)
        elif isinstance(content, list):
            texts.extend(p["text"] for p in content if isinstance(p, dict) and "text" in p)
    return texts


@dataclass(frozen=True, slots=True)
class Usage:
    """What the vendor says the call used. Prompt and output totals include their parts."""

    input_tokens: int = 0  # every prompt token: cache reads and writes included
    output_tokens: int = 0  # every output token: reasoning included
    cache_read_tokens: int = 0  # of input_tokens, read from the vendor's prompt cache
    cache_write_tokens: int = 0  # of input_tokens, written to it
    reasoning_tokens: int = 0  # of output_tokens, spent thinking

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def merged(self, later: Usage) -> Usage:
        """Return this usage with what a later report says (a field it leaves 0 stays)."""
        return Usage(
            input_tokens=later.input_tokens or self.input_tokens,
            output_tokens=later.output_tokens or self.output_tokens,
            cache_read_tokens=later.cache_read_tokens or self.cache_read_tokens,
            cache_write_tokens=later.cache_write_tokens or self.cache_write_tokens,
            reasoning_tokens=later.reasoning_tokens or self.reasoning_tokens,
        )


@dataclass(frozen=True, slots=True)
class Completion:
    """A vendor's whole answer: its JSON in its shape, and what Tollgate reads from it."""

    shape: str  # the shape `data` is in
    data: dict[str, Any]
    text: str  # the answer's text (the internal routes' whole answer)
    finish_reason: str  # "stop" | "length" | "tool_calls"
    usage: Usage
    model: str


@dataclass(frozen=True, slots=True)
class Chunk:
    """One event of a streamed answer: the vendor's JSON in its shape, and what it says."""

    shape: str = OPENAI
    event: dict[str, Any] | None = None  # None: nothing to pass on (only what it says)
    text: str = ""  # answer text it adds
    generated: bool = False  # it carries generated output (text, tool arguments, thinking)
    finish_reason: str | None = None
    usage: Usage | None = None


@dataclass(slots=True)
class StreamResult:
    """What a finished stream told us, filled in as chunks pass."""

    generated_chunks: int = 0  # generated chunks written to the client (its output)
    finish_reason: str | None = None
    usage: Usage = field(default_factory=Usage)
    prompt_tokens_estimate: int = 0

    finished: bool = False  # the vendor ended the stream (rather than a cut or a client)
    unsent_chunks: int = 0  # generated chunks folded, not yet written to the client

    def fold(self, chunk: Chunk) -> None:
        """Remember what a chunk says about the end of the answer."""
        if chunk.generated:
            self.unsent_chunks += 1
        if chunk.finish_reason:
            self.finish_reason = chunk.finish_reason
        if chunk.usage is not None:
            self.usage = self.usage.merged(chunk.usage)

    def delivered(self) -> None:
        """Count the chunks folded since the last write as the client's: they reached it."""
        self.generated_chunks += self.unsent_chunks
        self.unsent_chunks = 0

    def billed_usage(self) -> Usage:
        """Return what the vendor bills: its usage, or for a cut stream an estimate."""
        return self.usage if self.finished else self.usage_or_estimate()

    def usage_or_estimate(self) -> Usage:
        """Return what a stream cut before its end used: what its usage said so far
        (Anthropic tells the prompt first), the prompt's bound when it said nothing of it,
        and one output token per generated chunk written to the client (a client that
        leaves pays for what it was sent, not for what arrived after it left)."""
        if not self.generated_chunks:
            return self.usage
        return replace(
            self.usage,
            input_tokens=self.usage.input_tokens or self.prompt_tokens_estimate,
            output_tokens=max(self.usage.output_tokens, self.generated_chunks),
        )
