"""The operator's admin site: Django's, branded Tollgate, with one label per model.

Installed in place of `django.contrib.admin` (INSTALLED_APPS names TollgateAdminConfig), so
`admin.site` and every `@admin.register` are this site.
"""

from __future__ import annotations

from django.contrib.admin import AdminSite
from django.contrib.admin.apps import AdminConfig


class TollgateAdminSite(AdminSite):
    site_header = "Tollgate operator admin"
    site_title = "Tollgate admin"
    index_title = "Operator records"

    def get_app_list(self, request, app_label=None):
        """The apps and their models, a model listed by its ModelAdmin's `site_label` where
        it has one: two models of one name ("Groups": auth's and the tenants') read apart
        without renaming either model (no migration)."""
        apps = super().get_app_list(request, app_label)
        for app in apps:
            for entry in app["models"]:
                label = getattr(self._registry.get(entry["model"]), "site_label", None)
                if label:
                    entry["name"] = label
            app["models"].sort(key=lambda entry: entry["name"])
        return apps


class TollgateAdminConfig(AdminConfig):
    default_site = "core.admin_site.TollgateAdminSite"
