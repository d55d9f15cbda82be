from django.apps import AppConfig


class UsageConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "usage"

    def ready(self) -> None:
        # Billing's periodic work (the reaper, reconciliation) reads the usage log through
        # billing.feed: billing never imports usage, so usage hands it over here.
        from billing.feed import usage_feed_register
        from usage.services import UsageLogFeed

        usage_feed_register(UsageLogFeed())
