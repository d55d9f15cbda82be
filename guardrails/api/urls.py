from django.urls import path

from guardrails.api import views

urlpatterns = [
    path("guardrails", views.GuardrailListView.as_view()),
    path("guardrails/<str:guardrail_id>", views.GuardrailDetailView.as_view()),
    path("guardrails/<str:guardrail_id>/rotate-secret", views.GuardrailRotateView.as_view()),
    path("guardrail-attachments", views.AttachmentListView.as_view()),
    path("guardrail-attachments/<str:attachment_id>", views.AttachmentDetailView.as_view()),
]
