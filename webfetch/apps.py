from django.apps import AppConfig


class WebfetchConfig(AppConfig):
    name = "webfetch"
    verbose_name = "Web acquisition"
