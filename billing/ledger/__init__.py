"""Every balance change in Tollgate (billing/ledger/wallet.py for now: the next commit splits
it into one module per concept and removes this re-export)."""

from billing.ledger.wallet import *  # noqa: F403
