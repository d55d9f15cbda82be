"""The request path's async face of money: budget holds, escrow, settlement.

Each step is one short transaction in a worker thread; a database failure becomes LM-5004
(refuse rather than serve unbilled) before any upstream call.
"""

from __future__ import annotations

import logging

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import DatabaseError

from billing import services
from gateway import errors
from gateway.context import RequestContext

log = logging.getLogger(__name__)


def _thread(fn):
    return sync_to_async(fn, thread_sensitive=False)


class Escrow:
    def __init__(self) -> None:
        self.ttl_s = settings.TOLLGATE["RESERVATION_TTL_S"]

    async def hold_budget(self, ctx: RequestContext, amount_micro: int) -> None:
        """Take the budget hold on group and key, or refuse with LM-4001."""
        caller = ctx.caller
        try:
            await _thread(services.spend_hold_take)(
                request_id=ctx.request_id,
                group_id=caller.group_id,
                api_key_id=caller.api_key_id,
                amount_micro=amount_micro,
                key_has_budget=caller.key_budget_max_micro is not None,
                ttl_s=self.ttl_s,
            )
        except services.Refused as refused:
            raise errors.BudgetExhausted(f"Budget exhausted ({refused}).") from None
        except DatabaseError:
            raise errors.DependencyDown() from None
        ctx.spend_hold_micro = amount_micro
        ctx.spend_hold_taken = True

    async def reserve(self, ctx: RequestContext, amount_micro: int) -> int:
        """Hold a platform attempt's worst-case cost on the wallet, or raise LM-4002."""
        try:
            return await _thread(services.reservation_take)(
                account_id=ctx.caller.account_id,
                request_id=ctx.request_id,
                amount_micro=amount_micro,
                ttl_s=self.ttl_s,
                attempt_no=len(ctx.trail) + 1,
            )
        except services.Refused:
            raise errors.WalletInsufficient() from None
        except DatabaseError:
            raise errors.DependencyDown() from None

    async def cancel(self, reservation_id: int) -> None:
        try:
            await _thread(services.reservation_cancel)(reservation_id=reservation_id)
        except DatabaseError:
            log.error("could not cancel reservation %s; the reaper will expire it", reservation_id)

    async def settle(self, settlement: services.Settlement) -> None:
        try:
            await _thread(services.request_settle)(settlement)
        except DatabaseError:
            log.error(
                "could not settle request %s; its holds expire via the reaper",
                settlement.request_id,
            )
