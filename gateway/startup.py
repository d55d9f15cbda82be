"""Start-up: refuse a database this release does not understand; apply bootstrap profiles."""

from __future__ import annotations

import logging

import redis
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import IntegrityError, connection
from django.db.migrations.loader import MigrationLoader

from core.db import off_loop
from providers.spec import profiles_bootstrap, read_profiles_spec

log = logging.getLogger(__name__)


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


def check_redis_persistence() -> None:
    """Refuse a production Redis without an append-only file, unless the operator said so.

    The usage journal is a Redis stream: a crash of a Redis that keeps nothing on disk loses
    the measured rows it held, which are then charged at their hold instead.
    """
    if settings.EMBEDDED or not settings.REDIS_URL or settings.REDIS_PERSISTENCE != "check":
        return
    client = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=2, socket_connect_timeout=2)
    try:
        appendonly = client.config_get("appendonly").get("appendonly")
    except redis.ResponseError as exc:  # a managed Redis that hides CONFIG
        raise ImproperlyConfigured(
            f"Cannot read Redis's persistence ({exc}): set TOLLGATE_REDIS_PERSISTENCE=trusted "
            "if this Redis keeps an append-only file, or =none to run without one on purpose."
        ) from None
    except redis.RedisError as exc:
        # Tollgate serves through a Redis outage; a restart during one must not stop it.
        log.warning("could not check Redis persistence at start (%s); serving anyway", exc)
        return
    finally:
        client.close()
    if appendonly != "yes":
        raise ImproperlyConfigured(
            "Redis keeps no append-only file (appendonly is "
            f"{appendonly or 'unknown'}): a Redis crash would lose the usage journal's measured "
            "rows. Run Redis with `appendonly yes` (docs/production.md), or set "
            "TOLLGATE_REDIS_PERSISTENCE=none to run without it on purpose (rows lost in a crash "
            "are then charged at their hold)."
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
    await off_loop(check_redis_persistence)()
    await off_loop(bootstrap_profiles)()
