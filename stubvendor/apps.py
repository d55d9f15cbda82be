from django.apps import AppConfig


class StubVendorConfig(AppConfig):
    """Installed only so `python manage.py runstub` finds its command."""

    name = "stubvendor"
    verbose_name = "Stub vendor"
