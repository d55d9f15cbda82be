from django.urls import path, re_path

from scim import views

urlpatterns = [
    path("ServiceProviderConfig", views.service_provider_config),
    path("ResourceTypes", views.resource_types),
    path("ResourceTypes/<str:name>", views.resource_types),
    path("Schemas", views.schema_list),
    path("Schemas/<str:urn>", views.schema_list),
    path("Users", views.user_list),
    path("Users/.search", views.user_search),
    path("Users/<str:user_id>", views.user_detail),
    path("Groups", views.group_list),
    path("Groups/.search", views.group_search),
    path("Groups/<str:group_id>", views.group_detail),
    path(".search", views.root_search),
    # Anything else is SCIM's 404, in its error schema (RFC 7644 §3.12).
    re_path(r"^(?P<rest>.*)$", views.unknown),
]
