from django.apps import AppConfig


class GatewayConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "gateway"

    def ready(self) -> None:
        # The shapes are pure translation and read no settings: they are told the one they
        # need here, once the settings are loaded.
        from core.config import tollgate
        from gateway.shapes import common

        common.MAX_ROUTE = tollgate().max_route
