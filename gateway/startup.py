"""Start-up: refuse a database this release does not understand; apply bootstrap profiles."""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import IntegrityError, connection
from django.db.migrations.loader import MigrationLoader

from core.db import off_loop
from providers.services import profiles_bootstrap, read_profiles_spec


def unknown_applied_migrations() -> list[str]:
    """Return migrations applied in the database that this release does not ship."""
    loader = MigrationLoader(connection, ignore_no_migrations=True)
    ours = set(loader.disk_migrations)
    return sorted(
        f"{app}.{name}" for app, name in loader.applied_migrations if (app, name) not in ours
    )


def pending_migrations() -> list[str]:
    loader = MigrationLoader(connection, ignore_no_migrations=True)
    return sorted(
        f"{app}.{name}"
        for app, name in loader.disk_migrations
        if (app, name) not in loader.applied_migrations
    )


def _check() -> None:
    unknown = unknown_applied_migrations()
    if unknown:
        raise ImproperlyConfigured(
            "The database carries migrations this release does not know "
            f"({', '.join(unknown[:5])}): it was migrated by a newer Tollgate. Refusing to start; "
            "roll back by turning GATEWAY_BYOK_ENABLED off on the newer release instead."
        )
    pending = pending_migrations()
    if pending:
        raise ImproperlyConfigured(
            f"The database is missing migrations ({', '.join(pending[:5])}): run "
            "`python manage.py migrate` first."
        )


def bootstrap_profiles() -> int:
    """Apply PROVIDER_PROFILES_JSON (idempotent); return how many profiles it names."""
    if not settings.PROVIDER_PROFILES_JSON:
        return 0
    spec = read_profiles_spec(settings.PROVIDER_PROFILES_JSON)
    try:
        profiles_bootstrap(spec=spec)
    except IntegrityError:  # another replica created the same rows at the same moment
        profiles_bootstrap(spec=spec)
    return len(spec)


async def prepare() -> None:
    """Run before serving: refuse a foreign database, then apply bootstrap profiles."""
    await off_loop(_check)()
    await off_loop(bootstrap_profiles)()
