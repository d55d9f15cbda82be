"""How a vendor that speaks OpenAI's bodies on paths and headers of its own (Azure) plugs
into the OpenAI handlers: the Dialect a request carries under DIALECT."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from aiohttp import web

if TYPE_CHECKING:
    from stubvendor.rendering import Rendered
    from stubvendor.state import StubState


class Dialect(Protocol):
    """A vendor that speaks OpenAI's bodies on paths and headers of its own (Azure:
    stubvendor/azure.py): the OpenAI handlers serve its calls and ask it these."""

    # Read-only (properties) so a frozen dataclass satisfies the protocol.
    @property
    def key_header(self) -> str:
        """The header that carries the key."""
        ...

    @property
    def path_model(self) -> str | None:
        """The model its path names (a deployment); None: the body's."""
        ...

    @property
    def recorded(self) -> dict[str, Any]:
        """What the calls log keeps of a call beyond the usual fields."""
        ...

    def refuse(
        self, state: StubState, key: str | None, body: dict[str, Any]
    ) -> web.Response | None:
        """Refuse a recorded call in the dialect's own error shape (its key check too)."""
        ...

    def adjust(self, reply: Rendered) -> Rendered:
        """Return the reply as the dialect sends it."""
        ...


DIALECT = web.RequestKey("stub_dialect", Dialect)
