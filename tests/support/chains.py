"""A tenant, its principal and the gateway's own breakers and key rotation, in this process:
what the orchestrator tests of tests/unit run a chain against."""

from __future__ import annotations

from billing.escrow import Escrow
from billing.request_money import RequestMoney
from byok.pools import Pool, PoolKey
from byok.routing import KeyRotation
from core.money import TokenPrices
from core.shared_state import SharedState
from gateway.auth import Principal
from gateway.breakers import BreakerBoard
from gateway.catalog import ModelOffer, Profile
from tests.support.tenants import make_tenant


class ChainWorld:
    """A tenant with a prepaid wallet or an invoiced account, its principal, its team pools,
    and breakers and key benches on their per-process fallback (no Redis), so what one test
    opens or benches no other test sees."""

    def __init__(self, *, invoiced: bool = True) -> None:
        self.tenant = make_tenant(invoiced=invoiced, wallet_micro=1_000_000)
        self.pools: dict[tuple[int, str], Pool] = {}
        self.principal = Principal(
            account_id=self.tenant.account_id,
            billing_mode="invoiced" if invoiced else "prepaid",
            group_id=self.tenant.group_id,
            group_budget_max_micro=None,
            group_rpm=None,
            group_tpm=None,
            group_concurrency=None,
            bandwidth_micro_per_gb=0,
            api_key_id=self.tenant.api_key_id,
        )
        self.shared = SharedState()
        self.shared.client = None  # the per-process fallback: nothing shared between tests
        self.breakers = BreakerBoard(self.shared)
        self.keys = KeyRotation(self.shared)

    def team_pool(self, provider: str, *secrets: str, fallback: bool) -> Pool:
        """Give the group a team pool for `provider` with these keys, in this order."""
        pool = Pool(
            group_id=self.tenant.group_id,
            provider=provider,
            fallback=fallback,
            keys=tuple(
                PoolKey(key_id=900_000 + n, label=f"key-{n}", secret=s)
                for n, s in enumerate(secrets)
            ),
        )
        self.pools[(self.tenant.group_id, provider)] = pool
        return pool

    def pool_for(self, group_id: int, provider: str) -> Pool | None:
        return self.pools.get((group_id, provider))

    def money_for(self, escrow: Escrow, request_id: str, estimate_micro: int) -> RequestMoney:
        """Open a request's money handle for this world's principal, as the pipeline's hold
        stage opens it."""
        return escrow.open_request(
            request_id=request_id,
            account_id=self.principal.account_id,
            group_id=self.principal.group_id,
            api_key_id=self.principal.api_key_id,
            estimate_micro=estimate_micro,
        )

    @staticmethod
    def offer(profile: Profile, model: str) -> ModelOffer:
        """`model` on `profile`: $1 / $2 per million tokens in / out, 100 tokens out at most."""
        return ModelOffer(
            profile=profile,
            name=model,
            upstream=f"{model}-upstream",
            prices=TokenPrices.configured(
                input_micro_per_mtok=1_000_000, output_micro_per_mtok=2_000_000
            ),
            max_output_tokens=100,
        )
