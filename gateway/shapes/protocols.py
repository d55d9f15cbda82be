"""The interfaces the gateway uses shapes through: `ClientShape`, what the pipeline needs of
the shape a client speaks, and `VendorShape`, what an adapter needs of the shape a vendor's
API speaks. Each shape module offers one object satisfying them (`OPENAI_SHAPE`, ...)."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from core.errors import GatewayError
from gateway.types import Chunk, Completion, ModelRequest, Usage


@runtime_checkable
class StreamRenderer(Protocol):
    """Render one client stream: each vendor chunk as it comes, then its end or its failure."""

    def chunk(self, chunk: Chunk) -> bytes: ...

    def finish(self, finish_reason: str, usage: Usage) -> bytes: ...

    def error(self, exc: GatewayError) -> bytes: ...


@runtime_checkable
class ClientShape(Protocol):
    """Read a client's body into a ModelRequest; render the answer, whole or streamed."""

    def parse_request(self, body: dict, *, fallback_header: str | None = None) -> ModelRequest:
        """Check a client's body and keep it whole (InvalidRequest for what is refused)."""
        ...

    def render_completion(self, c: Completion, *, request_id: str, req: ModelRequest) -> bytes:
        """Return the answer's body as the client's shape writes it."""
        ...

    def stream_renderer(self, req: ModelRequest, *, request_id: str, model: str) -> StreamRenderer:
        """Return the renderer of one client stream."""
        ...


@runtime_checkable
class VendorShape(Protocol):
    """Build the body a vendor's API is sent; read its whole answer."""

    def vendor_body(
        self,
        payload: dict,
        *,
        upstream_model: str,
        caller_label: str | None,
        max_tokens: int,
        stream: bool,
    ) -> bytes:
        """Return the payload as the vendor is sent it, with the fields Tollgate owns set."""
        ...

    def completion_from_vendor(self, data: dict, *, model: str) -> Completion:
        """Read the vendor's answer; `model` is the name the client asked for."""
        ...
