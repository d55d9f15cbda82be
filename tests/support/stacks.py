"""A running gateway with stub profiles installed, and clients for it."""

from __future__ import annotations

from dataclasses import dataclass

from tests.support.processes import Gateway, Stub
from tests.support.profiles import install_profiles
from tests.support.services import clear_shared_state
from tests.support.tenants import Tenant, make_tenant


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


def own_stack(gateway: Gateway, stub: Stub, spec: list[dict] | None = None) -> Stack:
    """Prepare a test's own gateway like the `stack` fixture does the shared one."""
    stub.clear()
    clear_shared_state()
    install_profiles(stub.url, spec)
    gateway.reload()
    return Stack(gateway=gateway, stub=stub)
