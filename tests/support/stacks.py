"""A running gateway with stub profiles installed, and clients for it."""

from __future__ import annotations

import signal
import threading
from dataclasses import dataclass

from tests.support.processes import Gateway, Stub
from tests.support.profiles import install_profiles
from tests.support.services import clear_shared_state
from tests.support.tenants import Tenant, make_tenant
from tests.support.waits import wait_until


@dataclass
class Stack:
    """A running gateway with stub profiles installed, and a helper to make tenants."""

    gateway: Gateway
    stub: Stub

    @property
    def url(self) -> str:
        return self.gateway.url

    def tenant(self, **kwargs) -> Tenant:
        tenant = make_tenant(**kwargs)
        return tenant

    def openai(self, tenant: Tenant, **kwargs):
        import openai

        return openai.OpenAI(
            base_url=f"{self.url}/v1", api_key=tenant.api_key, max_retries=0, **kwargs
        )

    def anthropic(self, tenant: Tenant, **kwargs):
        import anthropic

        return anthropic.Anthropic(
            base_url=self.url, api_key=tenant.api_key, max_retries=0, **kwargs
        )

    def kill_mid_stream(self, client, **create) -> list:
        """Stream `client.chat.completions.create(**create)` from a stub answering slowly,
        SIGKILL the gateway once two tokens have arrived, and return the chunks read (the
        stream is cut before its end: none carries usage)."""
        import openai

        self.stub.faults({"kind": "slow", "delay_ms": 500, "times": 1})
        chunks: list = []

        def read_stream() -> None:
            try:
                for chunk in client.chat.completions.create(stream=True, **create):
                    chunks.append(chunk)
            except openai.APIError:
                pass  # the gateway died under it

        reader = threading.Thread(target=read_stream)
        reader.start()
        wait_until(
            lambda: sum(bool(c.choices and c.choices[0].delta.content) for c in chunks) >= 2,
            what="tokens of the stream",
        )
        self.gateway.stop(signal.SIGKILL)
        reader.join(10)
        assert not any(c.usage for c in chunks)  # cut before its end
        return chunks


def own_stack(gateway: Gateway, stub: Stub, spec: list[dict] | None = None) -> Stack:
    """Prepare a test's own gateway like the `stack` fixture does the shared one."""
    stub.clear()
    clear_shared_state()
    install_profiles(stub.url, spec)
    gateway.reload()
    return Stack(gateway=gateway, stub=stub)
