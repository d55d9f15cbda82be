from django.urls import path

from alerts.api import views

urlpatterns = [
    path("alert-rules", views.RuleListView.as_view()),
    path("alert-rules/<int:rule_id>", views.RuleDetailView.as_view()),
    path("webhooks", views.WebhookListView.as_view()),
    path("webhooks/<int:webhook_id>", views.WebhookDetailView.as_view()),
    path("webhooks/<int:webhook_id>/rotate", views.WebhookRotateView.as_view()),
    path("webhooks/<int:webhook_id>/test", views.WebhookTestView.as_view()),
    path("webhooks/<int:webhook_id>/deliveries", views.WebhookDeliveriesView.as_view()),
]
