"""Every control-plane change appends one audit entry — who (a user, a tenant API token, an
operator, a command), from where, what, before and after — through each surface that makes
it: the tenant API, the dashboard's forms, the operator's admin and management commands.
Turning platform fallback on records the consent. No entry holds a secret."""

from __future__ import annotations

import io
import json

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.test import Client
from rest_framework.test import APIClient

from accounts.models import Account, ApiKey, Group, Membership, TenantToken
from audit.models import AuditEntry
from audit.services import FALLBACK_CONSENT
from audit.verify import stored_verdicts
from billing.models import LedgerEntry, Wallet
from byok.models import KeyPool, TeamKey
from byok.services import team_key_add
from providers.models import ProviderModel, ProviderProfile
from tests.audit.helpers import form_fields, last, said, trail
from tests.support.profiles import install_profiles
from tests.support.tenants import Tenant, make_tenant

pytestmark = pytest.mark.django_db

ADDRESS = "198.51.100.7"  # each surface is called from here: the entry must say so
TEAM_SECRET = "sk-team-secret-never-in-the-trail-4242"


def owner_of(tenant: Tenant):
    return Membership.objects.get(account_id=tenant.account_id, role="owner").user


def token_of(tenant: Tenant) -> TenantToken:
    return TenantToken.objects.get(user=owner_of(tenant))


def api(tenant: Tenant) -> APIClient:
    client = APIClient(REMOTE_ADDR=ADDRESS)
    client.credentials(HTTP_AUTHORIZATION=f"Token {tenant.api_token}")
    return client


def token_actor(tenant: Tenant) -> dict:
    token = token_of(tenant)
    owner = owner_of(tenant).username
    return {
        "actor_kind": "token",
        "actor_id": token.pk,
        "actor_label": f"{owner} via token {token.prefix}…",
        "remote_addr": ADDRESS,
    }


def dashboard(tenant: Tenant) -> Client:
    client = Client(REMOTE_ADDR=ADDRESS)
    client.force_login(owner_of(tenant))
    return client


def user_actor(tenant: Tenant) -> dict:
    owner = owner_of(tenant)
    return {
        "actor_kind": "user",
        "actor_id": owner.pk,
        "actor_label": owner.username,
        "remote_addr": ADDRESS,
    }


@pytest.fixture
def operator():
    user = get_user_model().objects.create_superuser("ops", "ops@example.invalid", "pw")
    client = Client(REMOTE_ADDR=ADDRESS)
    client.force_login(user)
    client.actor = {
        "actor_kind": "operator",
        "actor_id": user.pk,
        "actor_label": "ops",
        "remote_addr": ADDRESS,
    }
    return client


@pytest.fixture
def profiles():
    install_profiles("http://127.0.0.1:9")  # nothing is called: the profiles make pools valid


# ---------------------------------------------------------------- the tenant API (a token)


def test_keys_created_and_revoked_through_the_api_name_the_token_and_its_address():
    tenant = make_tenant()
    client = api(tenant)

    created = client.post(
        "/api/keys",
        {"group": tenant.group_id, "name": "ci", "budget_max_micro": 2_500_000},
        format="json",
    ).json()
    revoked = client.post(f"/api/keys/{created['id']}/revoke").json()

    key = ApiKey.objects.get(pk=created["id"])
    label = f"{key.prefix}… ci"
    assert said(last(tenant.account_id, "key.create")) == {
        **token_actor(tenant),
        "action": "key.create",
        "target_type": "key",
        "target_id": str(key.pk),
        "target_label": label,
        "before": {},
        "after": {
            "name": "ci",
            "prefix": key.prefix,
            "group_id": tenant.group_id,
            "expires_at": None,
            "revoked_at": None,
            "allowed_models": [],
            "budget_max_micro": 2_500_000,
            "budget_period": "none",
            "period_starts_at": None,
            "period_ends_at": None,
            "rpm_limit": None,
            "tpm_limit": None,
            "cache_mode": "",
            "cache_ttl_s": None,
            "cache_scope": "",
            "default_tags": [],
        },
        "consent": "",
    }
    assert said(last(tenant.account_id, "key.revoke")) == {
        **token_actor(tenant),
        "action": "key.revoke",
        "target_type": "key",
        "target_id": str(key.pk),
        "target_label": label,
        "before": {"revoked_at": None},
        "after": {"revoked_at": key.revoked_at.isoformat(timespec="microseconds")},
        "consent": "",
    }
    assert revoked["revoked_at"] is not None
    # Revoking again changes nothing, and records nothing.
    client.post(f"/api/keys/{created['id']}/revoke")
    assert AuditEntry.objects.filter(account_id=tenant.account_id, action="key.revoke").count() == 1
    # The secret shown once is in no entry.
    assert created["secret"] not in json.dumps([e.as_record() for e in trail(tenant.account_id)])


def test_a_budget_and_its_period_changed_through_the_api_record_only_what_changed():
    tenant = make_tenant(budget_micro=5_000_000)
    client = api(tenant)

    client.patch(
        f"/api/groups/{tenant.group_id}",
        {"budget_max_micro": 7_500_000, "budget_period": "monthly", "rpm_limit": None},
        format="json",
    )

    group = Group.objects.get(pk=tenant.group_id)
    assert said(last(tenant.account_id, "group.update")) == {
        **token_actor(tenant),
        "action": "group.update",
        "target_type": "group",
        "target_id": str(group.pk),
        "target_label": "default",
        "before": {
            "budget_max_micro": 5_000_000,
            "budget_period": "none",
            "period_starts_at": None,
            "period_ends_at": None,
        },
        "after": {
            "budget_max_micro": 7_500_000,
            "budget_period": "monthly",
            "period_starts_at": group.period_starts_at.isoformat(timespec="microseconds"),
            "period_ends_at": group.period_ends_at.isoformat(timespec="microseconds"),
        },
        "consent": "",
    }
    # The same values again: nothing changed, nothing recorded.
    client.patch(f"/api/groups/{tenant.group_id}", {"budget_max_micro": 7_500_000}, format="json")
    assert AuditEntry.objects.filter(action="group.update").count() == 1


def test_team_keys_and_the_fallback_switch_through_the_byok_routes(profiles):
    tenant = make_tenant()
    client = api(tenant)
    base = f"/admin/groups/{tenant.group_id}/byok"

    added = client.post(
        f"{base}/stub-openai/keys", {"label": "ci", "key": TEAM_SECRET}, format="json"
    ).json()
    on = client.put(f"{base}/stub-openai", {"fallback": True}, format="json")
    client.put(f"{base}/stub-openai", {"fallback": True}, format="json")  # no change
    off = client.put(f"{base}/stub-openai", {"fallback": False}, format="json")
    gone = client.delete(f"{base}/keys/{added['id']}")

    assert (on.status_code, off.status_code, gone.status_code) == (200, 200, 204)
    pool = KeyPool.objects.get(group_id=tenant.group_id, provider="stub-openai")
    key_label = "ci (…4242) in default · stub-openai"
    entries = [said(e) for e in trail(tenant.account_id)][-4:]
    actor = token_actor(tenant)
    assert entries == [
        {
            **actor,
            "action": "teamkey.add",
            "target_type": "teamkey",
            "target_id": str(added["id"]),
            "target_label": key_label,
            "before": {},
            "after": {
                "label": "ci",
                "last4": "4242",
                "provider": "stub-openai",
                "pool_fallback": False,
            },
            "consent": "",
        },
        {
            **actor,
            "action": "pool.fallback.enable",
            "target_type": "pool",
            "target_id": str(pool.pk),
            "target_label": "default · stub-openai",
            "before": {"fallback": False},
            "after": {"fallback": True},
            "consent": "Platform fallback on for stub-openai in group default: the account "
            "agrees to pay platform prices for requests its team keys cannot serve (from its "
            "wallet when prepaid, on its invoice otherwise).",
        },
        {
            **actor,
            "action": "pool.fallback.disable",
            "target_type": "pool",
            "target_id": str(pool.pk),
            "target_label": "default · stub-openai",
            "before": {"fallback": True},
            "after": {"fallback": False},
            "consent": "",
        },
        {
            **actor,
            "action": "teamkey.delete",
            "target_type": "teamkey",
            "target_id": str(added["id"]),
            "target_label": key_label,
            "before": {"label": "ci", "last4": "4242", "provider": "stub-openai"},
            "after": {},
            "consent": "",
        },
    ]
    assert entries[1]["consent"] == FALLBACK_CONSENT.format(provider="stub-openai", group="default")
    stored = json.dumps([e.as_record() for e in AuditEntry.objects.all()])
    assert TEAM_SECRET not in stored and TEAM_SECRET[:-4] not in stored


def test_a_new_pool_created_with_fallback_on_records_the_consent(profiles):
    tenant = make_tenant()
    api(tenant).put(
        f"/admin/groups/{tenant.group_id}/byok/stub-anthropic", {"fallback": True}, format="json"
    )
    entry = last(tenant.account_id, "pool.fallback.enable")
    assert (entry.before, entry.after) == ({"fallback": None}, {"fallback": True})
    assert entry.consent == FALLBACK_CONSENT.format(provider="stub-anthropic", group="default")


# ---------------------------------------------------------------- the dashboard (a person)


def test_members_and_roles_changed_in_the_dashboard_name_the_owner():
    tenant = make_tenant()
    client = dashboard(tenant)
    page = f"/dashboard/{tenant.account_id}/members/"

    client.post(page, {"username": "bea", "email": "bea@example.invalid", "role": "viewer"})
    bea = Membership.objects.get(account_id=tenant.account_id, user__username="bea")
    client.post(f"{page}{bea.pk}/role/", {"role": "admin"})
    client.post(f"{page}{bea.pk}/remove/")

    entries = [said(e) for e in trail(tenant.account_id)][-3:]
    common = {**user_actor(tenant), "target_type": "member", "target_id": str(bea.pk)}
    assert entries == [
        {
            **common,
            "action": "member.add",
            "target_label": "bea",
            "before": {},
            "after": {"user": "bea", "role": "viewer"},
            "consent": "",
        },
        {
            **common,
            "action": "member.role",
            "target_label": "bea",
            "before": {"role": "viewer"},
            "after": {"role": "admin"},
            "consent": "",
        },
        {
            **common,
            "action": "member.remove",
            "target_label": "bea",
            "before": {"user": "bea", "role": "admin"},
            "after": {},
            "consent": "",
        },
    ]


def test_a_budget_typed_in_dollars_in_the_dashboard_is_recorded_in_micro_usd():
    tenant = make_tenant(budget_micro=1_000_000)
    dashboard(tenant).post(
        f"/dashboard/{tenant.account_id}/groups/{tenant.group_id}/",
        {"name": "default", "budget": "12.345678", "tpm_limit": "1000"},
    )
    assert said(last(tenant.account_id, "group.update")) == {
        **user_actor(tenant),
        "action": "group.update",
        "target_type": "group",
        "target_id": str(tenant.group_id),
        "target_label": "default",
        "before": {"budget_max_micro": 1_000_000, "tpm_limit": None},
        "after": {"budget_max_micro": 12_345_678, "tpm_limit": 1_000},
        "consent": "",
    }


def test_the_dashboards_fallback_switch_records_the_consent(profiles):
    tenant = make_tenant()
    client = dashboard(tenant)
    group = Group.objects.get(pk=tenant.group_id)
    team_key_add(group=group, provider="stub-openai", label="ci", key=TEAM_SECRET)
    client.post(
        f"/dashboard/{tenant.account_id}/team-keys/fallback/",
        {"group": tenant.group_id, "provider": "stub-openai", "fallback": "on"},
    )
    entry = last(tenant.account_id, "pool.fallback.enable")
    assert said(entry) == {
        **user_actor(tenant),
        "action": "pool.fallback.enable",
        "target_type": "pool",
        "target_id": str(KeyPool.objects.get(group=group).pk),
        "target_label": "default · stub-openai",
        "before": {"fallback": False},
        "after": {"fallback": True},
        "consent": FALLBACK_CONSENT.format(provider="stub-openai", group="default"),
    }
    # The key added by a direct call (no surface) is attributed to the system.
    added = last(tenant.account_id, "teamkey.add")
    assert (added.actor_kind, added.actor_label, added.remote_addr) == ("system", "system", None)


def test_a_pool_removed_in_the_dashboard_lists_its_keys_by_label(profiles):
    tenant = make_tenant()
    group = Group.objects.get(pk=tenant.group_id)
    team_key_add(group=group, provider="stub-openai", label="one", key="sk-aaaa-1111")
    team_key_add(group=group, provider="stub-openai", label="two", key="sk-bbbb-2222")
    pool = KeyPool.objects.get(group=group)
    dashboard(tenant).post(f"/dashboard/{tenant.account_id}/team-keys/pools/{pool.pk}/remove/")

    assert said(last(tenant.account_id, "pool.delete")) == {
        **user_actor(tenant),
        "action": "pool.delete",
        "target_type": "pool",
        "target_id": str(pool.pk),
        "target_label": "default · stub-openai",
        "before": {
            "provider": "stub-openai",
            "fallback": False,
            "keys": ["one (…1111)", "two (…2222)"],
        },
        "after": {},
        "consent": "",
    }
    assert not TeamKey.objects.filter(pool_id=pool.pk).exists()


# ---------------------------------------------------------------- the admin (an operator)


def test_an_operators_wallet_top_up_and_adjustment_record_balances_before_and_after(operator):
    tenant = make_tenant(wallet_micro=1_250_000)
    wallet = Wallet.objects.get(account_id=tenant.account_id)

    for kind, amount in (("topup", "5.00"), ("adjustment", "-0.25")):
        answer = operator.post(
            "/django-admin/billing/wallet/",
            {
                "action": "credit",
                "_selected_action": [str(wallet.pk)],
                "kind": kind,
                "amount": amount,
                "reason": f"{kind} by ops",
                "apply": "1",
            },
        )
        assert answer.status_code == 302

    topup, adjustment = LedgerEntry.objects.filter(wallet=wallet).order_by("id")[1:]
    assert topup.actor == "ops"  # the ledger keeps the operator's name too
    common = {**operator.actor, "target_type": "wallet", "target_id": str(wallet.pk)}
    label = f"wallet of account {tenant.account_id}"
    assert said(last(tenant.account_id, "wallet.topup")) == {
        **common,
        "action": "wallet.topup",
        "target_label": label,
        "before": {"balance_micro": 1_250_000},
        "after": {
            "balance_micro": 6_250_000,
            "amount_micro": 5_000_000,
            "reason": "topup by ops",
            "ledger_entry": topup.pk,
        },
        "consent": "",
    }
    assert said(last(tenant.account_id, "wallet.adjustment")) == {
        **common,
        "action": "wallet.adjustment",
        "target_label": label,
        "before": {"balance_micro": 6_250_000},
        "after": {
            "balance_micro": 6_000_000,
            "amount_micro": -250_000,
            "reason": "adjustment by ops",
            "ledger_entry": adjustment.pk,
        },
        "consent": "",
    }


def test_suspending_and_resuming_an_account_records_the_reason(operator):
    tenant = make_tenant()
    for action, extra in (("suspend", {"apply": "1", "reason": "invoice overdue"}), ("resume", {})):
        operator.post(
            "/django-admin/accounts/account/",
            {"action": action, "_selected_action": [str(tenant.account_id)], **extra},
        )

    account = Account.objects.get(pk=tenant.account_id)
    suspend, resume = last(account.pk, "account.suspend"), last(account.pk, "account.resume")
    when = suspend.after["suspended_at"]
    assert said(suspend) == {
        **operator.actor,
        "action": "account.suspend",
        "target_type": "account",
        "target_id": str(account.pk),
        "target_label": account.name,
        "before": {"suspended_at": None, "suspended_reason": ""},
        "after": {"suspended_at": when, "suspended_reason": "invoice overdue"},
        "consent": "",
    }
    assert said(resume) == {
        **operator.actor,
        "action": "account.resume",
        "target_type": "account",
        "target_id": str(account.pk),
        "target_label": account.name,
        "before": {"suspended_at": when, "suspended_reason": "invoice overdue"},
        "after": {"suspended_at": None, "suspended_reason": ""},
        "consent": "",
    }
    assert account.suspended_at is None


def test_an_operators_budget_change_in_the_admin_is_recorded(operator):
    tenant = make_tenant(budget_micro=5_000_000)
    url = f"/django-admin/accounts/group/{tenant.group_id}/change/"
    fields = form_fields(operator.get(url).content.decode())

    saved = operator.post(url, {**fields, "budget_max_micro": "7.50", "rpm_limit": "60"})

    assert saved.status_code == 302, saved.content.decode()[:2000]
    assert said(last(tenant.account_id, "group.update")) == {
        **operator.actor,
        "action": "group.update",
        "target_type": "group",
        "target_id": str(tenant.group_id),
        "target_label": "default",
        "before": {"budget_max_micro": 5_000_000, "rpm_limit": None},
        "after": {"budget_max_micro": 7_500_000, "rpm_limit": 60},
        "consent": "",
    }


def test_a_membership_added_and_removed_in_the_admin_is_recorded(operator):
    tenant = make_tenant()
    carl = get_user_model().objects.create_user("carl")
    operator.post(
        "/django-admin/accounts/membership/add/",
        {"user": carl.pk, "account": tenant.account_id, "role": "admin"},
    )
    membership = Membership.objects.get(user=carl)
    operator.post(f"/django-admin/accounts/membership/{membership.pk}/delete/", {"post": "yes"})

    common = {**operator.actor, "target_type": "member", "target_id": str(membership.pk)}
    assert [said(e) for e in trail(tenant.account_id)][-2:] == [
        {
            **common,
            "action": "member.add",
            "target_label": "carl",
            "before": {},
            "after": {"user": "carl", "role": "admin"},
            "consent": "",
        },
        {
            **common,
            "action": "member.remove",
            "target_label": "carl",
            "before": {"user": "carl", "role": "admin"},
            "after": {},
            "consent": "",
        },
    ]


def test_a_profiles_price_and_platform_key_changed_in_the_admin_are_operator_wide(
    operator, profiles
):
    profile = ProviderProfile.objects.get(name="stub-openai")
    url = f"/django-admin/providers/providerprofile/{profile.pk}/change/"
    fields = form_fields(operator.get(url).content.decode())
    index = next(
        name.split("-")[1]
        for name, value in fields.items()
        if name.startswith("models-") and name.endswith("-name") and value == "gpt-4o-mini"
    )

    saved = operator.post(
        url,
        {
            **fields,
            f"models-{index}-input_micro_per_mtok": "0.20",
            "platform_key": "sk-new-platform-key-7777",
            "timeout_s": "9",
        },
    )

    assert saved.status_code == 302, saved.content.decode()[:3000]
    assert ProviderModel.objects.get(profile=profile, name="gpt-4o-mini").input_micro_per_mtok == (
        200_000
    )
    assert said(last(None, "profile.update")) == {
        **operator.actor,
        "action": "profile.update",
        "target_type": "profile",
        "target_id": str(profile.pk),
        "target_label": "stub-openai",
        "before": {
            "api_key_last4": "9f8e",
            "timeout_s": 5,
            "models": {"gpt-4o-mini": {"input_micro_per_mtok": 150_000}},
        },
        "after": {
            "api_key_last4": "7777",
            "timeout_s": 9,
            "models": {"gpt-4o-mini": {"input_micro_per_mtok": 200_000}},
        },
        "consent": "",
    }
    stored = json.dumps([e.as_record() for e in AuditEntry.objects.all()])
    assert "sk-new-platform-key" not in stored


def test_an_operators_key_revoke_action_and_pool_delete_go_through_the_services(
    operator, profiles, django_capture_on_commit_callbacks
):
    tenant = make_tenant()

    team_key_add(
        group=Group.objects.get(pk=tenant.group_id),
        provider="stub-openai",
        label="x",
        key=TEAM_SECRET,
    )
    operator.post(
        "/django-admin/accounts/apikey/",
        {"action": "revoke", "_selected_action": [str(tenant.api_key_id)]},
    )
    pool = KeyPool.objects.get(group_id=tenant.group_id)
    # The pool goes once the admin's transaction commits (replicas then reload what is stored).
    with django_capture_on_commit_callbacks(execute=True):
        operator.post(f"/django-admin/byok/keypool/{pool.pk}/delete/", {"post": "yes"})

    revoke, removed = last(tenant.account_id, "key.revoke"), last(tenant.account_id, "pool.delete")
    assert {k: said(revoke)[k] for k in operator.actor} == operator.actor
    assert said(removed) == {
        **operator.actor,
        "action": "pool.delete",
        "target_type": "pool",
        "target_id": str(pool.pk),
        "target_label": "default · stub-openai",
        "before": {"provider": "stub-openai", "fallback": False, "keys": ["x (…4242)"]},
        "after": {},
        "consent": "",
    }
    assert not KeyPool.objects.filter(pk=pool.pk).exists()


# ---------------------------------------------------------------- management commands


def test_create_tenant_records_each_step_as_the_command_and_chains_them():
    out = io.StringIO()
    call_command(
        "create_tenant", "--name", "acme", "--wallet-micro", "5000000", "--json", stdout=out
    )
    data = json.loads(out.getvalue())

    entries = trail(data["account_id"])
    assert [(e.seq, e.action) for e in entries] == [
        (1, "account.create"),
        (2, "member.add"),
        (3, "token.create"),
        (4, "group.create"),
        (5, "key.create"),
        (6, "wallet.opening"),
    ]
    assert {(e.actor_kind, e.actor_id, e.actor_label, e.remote_addr) for e in entries} == {
        ("system", None, "manage.py create_tenant", None)
    }
    assert entries[0].after == {"name": "acme", "billing_mode": "prepaid"}
    assert entries[1].after == {"user": "acme-owner", "role": "owner"}
    token = TenantToken.objects.get(user__username="acme-owner")
    assert entries[2].after == {"prefix": token.prefix, "user": "acme-owner"}
    assert entries[5].before == {"balance_micro": 0}
    assert entries[5].after["balance_micro"] == 5_000_000
    text = json.dumps([e.as_record() for e in entries])
    assert data["api_key"] not in text and data["api_token"] not in text
    assert [entries[i].prev_hash == entries[i - 1].hash for i in range(1, 6)] == [True] * 5
    verdict = stored_verdicts(data["account_id"])[data["account_id"]]
    assert (verdict.ok, verdict.checked) == (True, 6)


def test_load_profiles_records_a_created_profile_then_only_its_changes(tmp_path):
    spec = [
        {
            "name": "acme-openai",
            "kind": "openai",
            "base_url": "https://api.example.invalid/v1",
            "models": [{"name": "m", "input_micro_per_mtok": 100, "output_micro_per_mtok": 200}],
        }
    ]
    path = tmp_path / "profiles.json"
    path.write_text(json.dumps(spec))
    call_command("load_profiles", "--json", str(path), stdout=io.StringIO())
    call_command("load_profiles", "--json", str(path), stdout=io.StringIO())  # unchanged
    spec[0]["models"][0]["output_micro_per_mtok"] = 300
    path.write_text(json.dumps(spec))
    call_command("load_profiles", "--json", str(path), stdout=io.StringIO())

    profile = ProviderProfile.objects.get(name="acme-openai")
    entries = list(AuditEntry.objects.filter(target_type="profile", target_id=str(profile.pk)))
    assert [e.action for e in entries] == ["profile.create", "profile.update"]
    assert {(e.actor_kind, e.actor_label, e.account_id) for e in entries} == {
        ("system", "manage.py load_profiles", None)
    }
    assert entries[0].after["models"] == {
        "m": {
            "kind": "chat",
            "upstream": "m",
            "input_micro_per_mtok": 100,
            "output_micro_per_mtok": 200,
            "cached_input_micro_per_mtok": None,
            "cache_write_micro_per_mtok": None,
            "max_output_tokens": 4096,
            "aliases": [],
            "cacheable": False,
            "cache_max_ttl_s": 86_400,
            "cache_hit_price_pct": 10,
        }
    }
    assert (entries[1].before, entries[1].after) == (
        {"models": {"m": {"output_micro_per_mtok": 200}}},
        {"models": {"m": {"output_micro_per_mtok": 300}}},
    )
