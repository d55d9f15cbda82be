from django.urls import path

from byok.api import views

urlpatterns = [
    path("groups/<int:group_id>/byok", views.PoolListView.as_view()),
    path("groups/<int:group_id>/byok/keys/<int:key_id>", views.TeamKeyView.as_view()),
    path("groups/<int:group_id>/byok/<str:provider>", views.PoolView.as_view()),
    path("groups/<int:group_id>/byok/<str:provider>/keys", views.PoolKeysView.as_view()),
]
