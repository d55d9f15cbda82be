"""Tollgate's own request / response / chunk values, shared by every shape and adapter."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Message:
    role: str  # "user" or "assistant"; the system prompt lives on ChatRequest
    content: str


@dataclass(frozen=True, slots=True)
class ChatRequest:
    model: str
    messages: tuple[Message, ...]
    system: str | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    stop: tuple[str, ...] = ()
    stream: bool = False
    include_usage: bool = False  # the OpenAI client asked for a streamed usage chunk
    caller_id: str | None = None  # raw end-user id: never logged, forwarded or stored
    chain: tuple[str, ...] = ()  # the client's chain: model, then its route list

    def prompt_text_words(self) -> int:
        """Count whitespace-separated words in the prompt (the token estimate's base)."""
        words = len(self.system.split()) if self.system else 0
        return words + sum(len(m.content.split()) for m in self.messages)


@dataclass(frozen=True, slots=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens


@dataclass(frozen=True, slots=True)
class Completion:
    text: str
    finish_reason: str  # "stop" | "length"
    usage: Usage
    model: str


@dataclass(frozen=True, slots=True)
class Chunk:
    """One piece of a streamed answer: text, or the end (finish reason), or the usage."""

    text: str = ""
    finish_reason: str | None = None
    usage: Usage | None = None


@dataclass(slots=True)
class StreamResult:
    """What a finished stream told us, filled in as chunks pass."""

    text_chunks: int = 0
    finish_reason: str | None = None
    usage: Usage = field(default_factory=Usage)
    prompt_tokens_estimate: int = 0

    finished: bool = False  # the vendor ended the stream (rather than a cut or a client)

    def fold(self, chunk: Chunk) -> None:
        """Remember what a chunk says about the end of the answer."""
        if chunk.text:
            self.text_chunks += 1
        if chunk.finish_reason:
            self.finish_reason = chunk.finish_reason
        if chunk.usage is not None:
            self.usage = Usage(
                input_tokens=chunk.usage.input_tokens or self.usage.input_tokens,
                output_tokens=chunk.usage.output_tokens or self.usage.output_tokens,
            )

    def billed_usage(self) -> Usage:
        """Return what the vendor bills: its usage, or for a cut stream an estimate."""
        return self.usage if self.finished else self.usage_or_estimate()

    def usage_or_estimate(self) -> Usage:
        """Return the vendor's usage, or, for a stream cut before it arrived, an estimate:
        the prompt's bound and one token per text chunk received (what the vendor bills)."""
        if self.usage.output_tokens or self.usage.input_tokens:
            return self.usage
        if not self.text_chunks:
            return self.usage
        return Usage(input_tokens=self.prompt_tokens_estimate, output_tokens=self.text_chunks)
