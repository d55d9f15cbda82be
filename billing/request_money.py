"""One request's money on the request path: the handle the pipeline opens and closes.

The pipeline opens it (`Escrow.open_request`) and takes the budget hold through it, with the
first platform call's wallet reservation when that call is sure. Before each platform call
the orchestrator asks it for the call's cover (`before_platform_call`); a call that failed
gives its reservation back (`unused`); the pipeline's finish closes it. The crash-mark
protocol lives here alone: before a platform call is sent, a wallet reservation (which
records its call) or the hold (marked, or taken marked) says the call went out, so a gateway
dying mid-answer leaves a charge, not a free request (billing/reaper.py). Settlement is not
here: it rides on the usage row (billing/settlement.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from billing.ledger.fused import FirstReservation
from billing.ledger.holds import Hold

if TYPE_CHECKING:
    from billing.escrow import Escrow


class RequestMoney:
    def __init__(
        self,
        escrow: Escrow,
        *,
        request_id: str,
        account_id: int,
        group_id: int,
        api_key_id: int | None,
        estimate_micro: int,
    ) -> None:
        self._escrow = escrow
        self.request_id = request_id
        self.account_id = account_id
        self.group_id = group_id
        self.api_key_id = api_key_id
        self.estimate_micro = estimate_micro  # the plan's worst case: a marked hold's amount
        self._held = False  # a hold row exists
        self._marked = False  # the hold says a platform call was sent
        # The first call's reservation when the hold took it too: (that call, its id), until
        # the orchestrator runs that call on it (else `close` cancels it).
        self._ahead: tuple[object, int] | None = None

    async def hold(self, hold: Hold, *, first: FirstReservation | None, first_call: object) -> None:
        """Take the budget hold (LM-4001), and `first`, the reservation of `first_call`, with
        it when the escrow can (one commit before the vendor call instead of two)."""
        reservation_id = await self._escrow.hold_budget(hold, first=first)
        self._held = True
        if reservation_id is not None:
            self._ahead = (first_call, reservation_id)

    async def before_platform_call(
        self, call: object, *, escrow_micro: int | None, attempt_no: int
    ) -> int | None:
        """Cover a platform call about to be sent: return the wallet reservation it runs on
        (taken ahead with the hold, or now: LM-4002 when the wallet cannot cover
        `escrow_micro`), or None when it needs none (`escrow_micro` None) and the hold now
        says a call was sent."""
        if self._ahead is not None and self._ahead[0] is call:
            reservation_id = self._ahead[1]
            self._ahead = None
            return reservation_id
        if escrow_micro is not None:
            return await self._escrow.reserve(
                account_id=self.account_id,
                request_id=self.request_id,
                group_id=self.group_id,
                api_key_id=self.api_key_id,
                attempt_no=attempt_no,
                amount_micro=escrow_micro,
            )
        if not self._marked:
            self._held = await self._escrow.mark_sent(
                request_id=self.request_id,
                group_id=self.group_id,
                api_key_id=self.api_key_id,
                amount_micro=self.estimate_micro,
                hold_taken=self._held,
            )
            self._marked = True
        return None

    async def unused(self, reservation_id: int) -> None:
        """Give back a reservation whose call served nothing."""
        await self._escrow.cancel(reservation_id)

    async def close(self) -> None:
        """Give back a reservation taken ahead whose call was never made."""
        if self._ahead is not None:
            reservation_id, self._ahead = self._ahead[1], None
            await self._escrow.cancel(reservation_id)
