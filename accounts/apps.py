from django.apps import AppConfig


class AccountsConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "accounts"

    def ready(self) -> None:
        # Registers the Token scheme with drf-spectacular before any schema is generated.
        from accounts.api import schema  # noqa: F401
