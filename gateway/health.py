"""Readiness: the dependencies a gateway replica needs to serve billed traffic."""

from __future__ import annotations

from django.db import connection

from core.db import off_loop
from core.shared_state import SharedStateDown


def _database_ok() -> bool:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        return True
    except Exception:
        return False


async def readiness(runtime) -> dict[str, bool]:
    checks = {"database": await off_loop(_database_ok)()}
    if runtime.shared.client is not None:
        try:
            checks["redis"] = bool(await runtime.shared.call(lambda r: r.ping()))
        except SharedStateDown:
            checks["redis"] = False
    return checks
