from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView

urlpatterns = [
    path("django-admin/", admin.site.urls),
    path("api/", include("accounts.api.urls")),
    path("api/", include("usage.api.urls")),
    path("api/", include("billing.api.urls")),
    path("admin/", include("byok.api.urls")),
    path("api/schema", SpectacularAPIView.as_view(), name="schema"),
    path("", include("dashboard.urls")),
]
