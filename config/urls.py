from csp.constants import UNSAFE_INLINE
from csp.decorators import csp_update
from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import (
    SpectacularAPIView,
    SpectacularRedocView,
    SpectacularSwaggerSplitView,
)

from byok.api.payers import KeyPayersView
from scim.api import ScimTokenView

# Swagger UI and Redoc style their pages with inline styles and Redoc searches in a worker it
# makes from a blob: their two pages allow these; their scripts stay our own files.
docs_csp = csp_update({"style-src": [UNSAFE_INLINE], "worker-src": ["blob:"]})

urlpatterns = [
    path("django-admin/", admin.site.urls),
    path("api/", include("accounts.api.urls")),
    path("api/", include("usage.api.urls")),
    path("api/", include("billing.api.urls")),
    path("api/", include("alerts.api.urls")),
    path("api/", include("guardrails.api.urls")),
    path("api/keys/<int:key_id>/payers", KeyPayersView.as_view()),  # byok reads the key's map
    path("admin/", include("byok.api.urls")),
    path("api/scim-token", ScimTokenView.as_view()),
    # SCIM 2.0 provisioning (RFC 7644): its own errors and content type (scim/views.py).
    path("scim/v2/", include("scim.urls")),
    path("api/schema", SpectacularAPIView.as_view(), name="schema"),
    path("api/schema/", SpectacularAPIView.as_view()),
    # Local Swagger UI and Redoc assets (drf-spectacular-sidecar); no CDN.
    # The split view serves its start-up script as a file (?script), not inline.
    path(
        "api/docs/",
        docs_csp(SpectacularSwaggerSplitView.as_view(url_name="schema")),
        name="api-docs",
    ),
    path(
        "api/redoc/",
        docs_csp(SpectacularRedocView.as_view(url_name="schema", template_name="api/redoc.html")),
        name="api-redoc",
    ),
    path("", include("sso.urls")),
    path("", include("dashboard.urls")),
    # A model request sent here answers JSON naming the gateway's base URLs.
    path("", include("config.model_routes")),
]

# The tenant API (/api/, /admin/groups/) answers its errors as JSON in our error language;
# every other path keeps Django's pages (accounts/api/errors.py).
handler400 = "accounts.api.errors.bad_request"
handler403 = "accounts.api.errors.permission_denied"
handler404 = "accounts.api.errors.page_not_found"
handler500 = "accounts.api.errors.server_error"
