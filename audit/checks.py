"""The deploy check: may the role Tollgate runs as rewrite its own proof? (core/db_roles.py)"""

from __future__ import annotations

from django.core.checks import Warning, register
from django.db import DatabaseError, connection

from core.db_roles import owner_problems


@register(deploy=True)
def proof_is_not_the_apps_to_rewrite(app_configs, **kwargs) -> list[Warning]:
    if connection.vendor != "postgresql":
        return []
    try:
        with connection.cursor() as cursor:
            problems = owner_problems(cursor)
    except DatabaseError:
        return []  # no database to ask (a build step, a check before it is up)
    if not problems:
        return []
    return [
        Warning(
            "The database role Tollgate runs as can rewrite the audit trail, receipts or"
            f" ledger: {'; '.join(problems)}.",
            hint="Migrate as the owner (DATABASE_OWNER_URL) and run `manage.py grant_app_role`;"
            " serve as DATABASE_URL's own role (docs/production.md, 'Two database roles').",
            id="tollgate.W040",
        )
    ]
