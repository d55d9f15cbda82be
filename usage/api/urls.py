from django.urls import path

from usage.api import views

# Included under /api/.
urlpatterns = [
    path("usage", views.UsageListView.as_view()),
    path("usage/daily", views.UsagePerDayView.as_view()),
    path("usage/models", views.UsagePerModelView.as_view()),
    path("usage/cache", views.UsageCacheView.as_view()),
    path("usage/tags", views.UsagePerTagView.as_view()),
    path("usage/export.csv", views.UsageExportView.as_view()),
    path("usage/requests/<str:request_id>", views.UsageDetailView.as_view()),
]
