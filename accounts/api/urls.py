from django.urls import path

from accounts.api import access_groups, audit, heads, members, rotation, views

urlpatterns = [
    path("account", views.AccountView.as_view()),
    path("groups", views.GroupListView.as_view()),
    path("groups/<int:group_id>", views.GroupDetailView.as_view()),
    path("keys", views.ApiKeyListView.as_view()),
    path("keys/<int:key_id>", views.ApiKeyDetailView.as_view()),
    path("keys/<int:key_id>/revoke", views.ApiKeyRevokeView.as_view()),
    path("keys/<int:key_id>/rotate", rotation.ApiKeyRotateView.as_view()),
    path("tokens", rotation.TenantTokenListView.as_view()),
    path("tokens/<int:token_id>/rotate", rotation.TenantTokenRotateView.as_view()),
    path("access-groups", access_groups.AccessGroupListView.as_view()),
    path("access-groups/<int:access_group_id>", access_groups.AccessGroupDetailView.as_view()),
    path("cache/purge", views.CachePurgeView.as_view()),
    path("members", members.MemberListView.as_view()),
    path("members/<int:member_id>", members.MemberDetailView.as_view()),
    path("directory-roles", members.DirectoryRolesView.as_view()),
    path("audit", audit.AuditListView.as_view()),
    path("audit/head", heads.AuditHeadView.as_view()),
    path("audit/export.csv", audit.AuditCsvView.as_view()),
    path("audit/export.jsonl", audit.AuditJsonLinesView.as_view()),
]
