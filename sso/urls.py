from django.urls import path

from sso import views

app_name = "sso"

urlpatterns = [
    path("login/sso/", views.choose, name="choose"),
    path("login/sso/operator/", views.operator_start, name="operator-start"),
    path("login/sso/callback/", views.callback, name="callback"),
    path("login/sso/<int:account_id>/", views.start, name="start"),
]
