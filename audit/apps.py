from django.apps import AppConfig
from django.db.backends.signals import connection_created


class AuditConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "audit"

    def ready(self) -> None:
        from audit import checks, guard  # noqa: F401  (checks registers the deploy check)

        connection_created.connect(guard.register_sqlite_function)
        guard.let_sqlite_flush_empty_the_trail()
