from django.contrib.auth import views as auth_views
from django.urls import path
from django.views.generic import RedirectView

from dashboard import (
    alerts,
    cache,
    directory_roles,
    guardrails,
    model_access,
    payers,
    receipts,
    rotation,
    scim_token,
    sso_settings,
    tag_budgets,
    team_keys,
    views,
)

app_name = "dashboard"

account = "dashboard/<int:account_id>/"

urlpatterns = [
    path("", RedirectView.as_view(pattern_name="dashboard:home"), name="root"),
    path("login/", views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(next_page="dashboard:login"), name="logout"),
    path("set-password/<uidb64>/<token>/", views.SetPasswordView.as_view(), name="set-password"),
    path("dashboard/", views.home, name="home"),
    path(account, views.overview, name="overview"),
    path(account + "charts/", views.charts, name="charts"),
    path(account + "keys/", views.keys, name="keys"),
    path(account + "keys/<int:key_id>/", views.key_edit, name="key-edit"),
    path(account + "keys/<int:key_id>/revoke/", views.key_revoke, name="key-revoke"),
    path(account + "keys/<int:key_id>/rotate/", rotation.key_rotate, name="key-rotate"),
    path(account + "keys/<int:key_id>/payers/", payers.key_payers, name="key-payers"),
    path(account + "groups/", views.groups, name="groups"),
    path(account + "groups/<int:group_id>/", views.group_edit, name="group-edit"),
    path(account + "tag-budgets/", tag_budgets.tag_budgets, name="tag-budgets"),
    path(
        account + "tag-budgets/<int:tag_budget_id>/",
        tag_budgets.tag_budget_edit,
        name="tag-budget-edit",
    ),
    path(
        account + "tag-budgets/<int:tag_budget_id>/remove/",
        tag_budgets.tag_budget_delete,
        name="tag-budget-delete",
    ),
    path(account + "access/", model_access.access_groups, name="access-groups"),
    path(
        account + "access/<int:access_group_id>/",
        model_access.access_group_edit,
        name="access-group-edit",
    ),
    path(
        account + "access/<int:access_group_id>/delete/",
        model_access.access_group_delete,
        name="access-group-delete",
    ),
    path(account + "keys/<int:key_id>/access/", model_access.key_access, name="key-access"),
    path(account + "groups/<int:group_id>/access/", model_access.group_access, name="group-access"),
    path(account + "guardrails/", guardrails.guardrails, name="guardrails"),
    path(
        account + "guardrails/<int:guardrail_id>/",
        guardrails.guardrail_edit,
        name="guardrail-edit",
    ),
    path(
        account + "guardrails/<int:guardrail_id>/rotate/",
        guardrails.guardrail_rotate,
        name="guardrail-rotate",
    ),
    path(
        account + "guardrails/<int:guardrail_id>/delete/",
        guardrails.guardrail_delete,
        name="guardrail-delete",
    ),
    path(
        account + "guardrails/attachments/<int:attachment_id>/detach/",
        guardrails.attachment_delete,
        name="guardrail-detach",
    ),
    path(account + "alerts/", alerts.alerts, name="alerts"),
    path(
        account + "alerts/rules/<int:rule_id>/delete/", alerts.rule_delete, name="alert-rule-delete"
    ),
    path(account + "alerts/webhooks/<int:webhook_id>/", alerts.webhook, name="alert-webhook"),
    path(
        account + "alerts/webhooks/<int:webhook_id>/test/",
        alerts.webhook_test,
        name="alert-webhook-test",
    ),
    path(
        account + "alerts/webhooks/<int:webhook_id>/delete/",
        alerts.webhook_delete,
        name="alert-webhook-delete",
    ),
    path(account + "members/", views.members, name="members"),
    path(account + "members/<int:member_id>/role/", views.member_role, name="member-role"),
    path(account + "members/<int:member_id>/remove/", views.member_remove, name="member-remove"),
    path(account + "members/scim-token/", scim_token.scim_token, name="scim-token"),
    path(
        account + "members/directory-roles/",
        directory_roles.directory_roles,
        name="directory-roles",
    ),
    path(account + "team-keys/", team_keys.team_keys, name="team-keys"),
    path(account + "team-keys/fallback/", team_keys.pool_fallback, name="pool-fallback"),
    path(
        account + "team-keys/<int:key_id>/remove/",
        team_keys.team_key_remove,
        name="team-key-remove",
    ),
    path(
        account + "team-keys/pools/<int:pool_id>/remove/",
        team_keys.pool_remove,
        name="pool-remove",
    ),
    path(account + "usage/", views.usage, name="usage"),
    path(account + "usage.csv", views.usage_csv, name="usage-csv"),
    path(account + "usage/<str:request_id>/", views.usage_detail, name="usage-detail"),
    path(account + "cache/", cache.cache, name="cache"),
    path(account + "cache/purge/", cache.cache_purge, name="cache-purge"),
    path(account + "wallet/", views.wallet, name="wallet"),
    path(account + "receipts/", receipts.receipts, name="receipts"),
    path(account + "receipts/statement.json", receipts.statement_json, name="receipts-statement"),
    path(account + "receipts/export.jsonl", receipts.receipts_jsonl, name="receipts-export"),
    path(account + "receipts/head.json", receipts.receipts_head_json, name="receipts-head"),
    path(account + "receipts/<str:request_id>/", receipts.receipt_detail, name="receipt-detail"),
    path(account + "receipts/<str:request_id>/json", receipts.receipt_json, name="receipt-json"),
    path(account + "sso/", sso_settings.sso_settings, name="sso-settings"),
    path(account + "audit/", views.audit, name="audit"),
    path(account + "audit.csv", views.audit_csv, name="audit-csv"),
    path(account + "audit.jsonl", views.audit_jsonl, name="audit-jsonl"),
    path(account + "audit/head.json", receipts.audit_head_json, name="audit-head"),
]
