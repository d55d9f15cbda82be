"""The tenant dashboard in-process: logins, roles, account scoping, CSRF, exact figures."""

from __future__ import annotations

import csv
import io
import json
import re
from zoneinfo import ZoneInfo

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.utils import timezone

from accounts.logins import password_link_issue
from accounts.models import ApiKey, Group, Membership
from accounts.secrets import hash_secret
from byok.models import KeyPool, TeamKey
from tests.support.profiles import install_profiles
from tests.support.tenants import Tenant, make_tenant
from tests.support.usage import attempt, journal_row, store, streamed_body

pytestmark = pytest.mark.django_db

PASSWORD = "a-long-enough-password-1"


def owner_of(tenant: Tenant):
    return Membership.objects.get(account_id=tenant.account_id, role="owner").user


def member(tenant: Tenant, role: str) -> Client:
    """A client signed in as a new member of the tenant's account with `role`."""
    user = get_user_model().objects.create_user(
        username=f"{role}-{tenant.account_id}", password=PASSWORD
    )
    Membership.objects.create(account_id=tenant.account_id, user=user, role=role)
    client = Client()
    client.force_login(user)
    return client


def signed_in(tenant: Tenant) -> Client:
    client = Client()
    client.force_login(owner_of(tenant))
    return client


def page(tenant: Tenant, path: str = "") -> str:
    return f"/dashboard/{tenant.account_id}/{path}"


def test_pages_need_a_login():
    tenant = make_tenant()
    response = Client().get(page(tenant))
    assert response.status_code == 302
    assert response["Location"] == f"/login/?next={page(tenant)}"
    assert Client().get("/").status_code == 302


def test_set_password_link_works_once_then_the_owner_signs_in():
    tenant = make_tenant()
    link = password_link_issue(user=owner_of(tenant))
    client = Client()

    form = client.get(link, follow=True)
    assert form.status_code == 200
    set_url = form.redirect_chain[-1][0]  # Django swaps the token for a session marker
    done = client.post(set_url, {"new_password1": PASSWORD, "new_password2": PASSWORD})
    assert done.status_code == 302 and done["Location"] == "/login/"

    again = Client().get(link, follow=True)
    assert "This link has been used or has expired" in again.content.decode()

    login = client.post("/login/", {"username": owner_of(tenant).username, "password": PASSWORD})
    assert login.status_code == 302 and login["Location"] == "/dashboard/"
    assert client.get("/dashboard/")["Location"] == page(tenant)


def test_create_tenant_prints_a_set_password_link(tmp_path):
    from django.core.management import call_command

    out = io.StringIO()
    call_command("create_tenant", "--name", "linked", "--json", stdout=out)
    import json

    data = json.loads(out.getvalue())
    # No TOLLGATE_PUBLIC_URL in the test settings: the link is on the default address.
    assert re.fullmatch(r"http://127.0.0.1:8000/set-password/[\w-]+/[\w-]+/", data["password_link"])
    path = data["password_link"].removeprefix("http://127.0.0.1:8000")
    assert Client().get(path, follow=True).context["validlink"] is True


def test_create_tenant_links_on_the_public_url(settings):
    from django.core.management import call_command

    settings.PUBLIC_URL = "https://tollgate.example.com"
    out, err = io.StringIO(), io.StringIO()
    call_command("create_tenant", "--name", "public", "--json", stdout=out, stderr=err)
    link = json.loads(out.getvalue())["password_link"]
    assert re.fullmatch(r"https://tollgate\.example\.com/set-password/[\w-]+/[\w-]+/", link)
    assert err.getvalue() == ""


def test_overview_shows_wallet_and_spend_today_exactly():
    tenant = make_tenant(wallet_micro=12_345_678)
    store(
        journal_row(
            group_id=tenant.group_id,
            account_id=tenant.account_id,
            provider_cost_micro=2_520,
            bandwidth_charge_micro=7,
            tokens_in=10,
            tokens_out=5,
        ),
        journal_row(
            group_id=tenant.group_id,
            account_id=tenant.account_id,
            status=429,
            error_code="LM-3001",
            upstream_sent=False,
        ),
    )
    html = signed_in(tenant).get(page(tenant)).content.decode()
    wallet = html.split('id="wallet-balance"')[1]
    # Beside today's sub-cent spend the balance shows its digits (cents alone: "$12.35").
    assert '<p class="big">$12.345678</p>' in wallet
    today = html.split('id="spend-today"')[1].split("</div>")[0]
    assert "$0.002527" in today  # under a cent: every digit
    requests = html.split('id="requests-today"')[1].split("</div>")[0]
    assert ">2<" in requests and "1 errors" in requests


def test_another_accounts_pages_and_objects_are_404():
    mine, theirs = make_tenant(), make_tenant()
    client = signed_in(mine)
    for path in ("", "charts/", "keys/", "team-keys/", "usage/", "wallet/", "usage.csv"):
        assert client.get(page(theirs, path)).status_code == 404, path
    # Their objects under my account's URLs are 404 too, and unchanged.
    assert client.post(page(mine, f"keys/{theirs.api_key_id}/revoke/")).status_code == 404
    assert ApiKey.objects.get(pk=theirs.api_key_id).revoked_at is None
    store(journal_row(group_id=theirs.group_id, account_id=theirs.account_id, request_id="req-t"))
    assert client.get(page(mine, "usage/req-t/")).status_code == 404
    assert client.get(page(mine, f"usage/?group={theirs.group_id}")).status_code == 404


def test_key_created_shows_its_secret_once_and_it_is_stored_hashed():
    tenant = make_tenant()
    client = signed_in(tenant)

    response = client.post(page(tenant, "keys/"), {"group": tenant.group_id, "name": "laptop"})

    assert response.status_code == 200
    assert "no-store" in response["Cache-Control"]
    secret = re.search(r'<code id="secret">([^<]+)</code>', response.content.decode()).group(1)
    created = ApiKey.objects.get(group_id=tenant.group_id, name="laptop")
    assert created.key_hash == hash_secret(secret)
    assert secret not in client.get(page(tenant, "keys/")).content.decode()


def test_key_revoked_from_the_dashboard():
    tenant = make_tenant()
    client = signed_in(tenant)
    response = client.post(page(tenant, f"keys/{tenant.api_key_id}/revoke/"))
    assert response.status_code == 302
    assert ApiKey.objects.get(pk=tenant.api_key_id).revoked_at is not None


def test_a_key_for_another_accounts_group_is_refused():
    mine, theirs = make_tenant(), make_tenant()
    response = signed_in(mine).post(page(mine, "keys/"), {"group": theirs.group_id})
    assert response.status_code == 200
    assert "Select a valid choice" in response.content.decode()
    assert ApiKey.objects.filter(group_id=theirs.group_id).count() == 1


def test_viewer_sees_but_cannot_change():
    tenant = make_tenant()
    viewer = member(tenant, Membership.Role.VIEWER)

    keys_page = viewer.get(page(tenant, "keys/")).content.decode()
    assert 'id="create-key"' not in keys_page and "Revoke" not in keys_page
    assert viewer.post(page(tenant, "keys/"), {"group": tenant.group_id}).status_code == 403
    assert viewer.post(page(tenant, f"keys/{tenant.api_key_id}/revoke/")).status_code == 403
    assert ApiKey.objects.filter(group_id=tenant.group_id, revoked_at=None).count() == 1

    admin = member(tenant, Membership.Role.ADMIN)
    assert admin.post(page(tenant, "keys/"), {"group": tenant.group_id}).status_code == 200
    assert ApiKey.objects.filter(group_id=tenant.group_id).count() == 2


def test_every_form_needs_its_csrf_token():
    tenant = make_tenant()
    client = Client(enforce_csrf_checks=True)
    client.force_login(owner_of(tenant))
    for path in (
        "keys/",
        f"keys/{tenant.api_key_id}/revoke/",
        "team-keys/",
        "team-keys/fallback/",
        "team-keys/1/remove/",
    ):
        assert client.post(page(tenant, path), {"group": tenant.group_id}).status_code == 403
    assert client.post("/logout/").status_code == 403
    assert ApiKey.objects.get(pk=tenant.api_key_id).revoked_at is None
    # With the token the page's form carries, the same post goes through.
    form = client.get(page(tenant, "keys/")).content.decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form).group(1)
    done = client.post(
        page(tenant, "keys/"), {"group": tenant.group_id, "csrfmiddlewaretoken": token}
    )
    assert done.status_code == 200 and 'id="secret"' in done.content.decode()


def test_team_keys_added_listed_with_last4_fallback_and_removed(stub):
    install_profiles(stub.url)
    tenant = make_tenant()
    client = signed_in(tenant)

    listing = client.get(page(tenant, "team-keys/")).content.decode()
    eligible = re.findall(r'<li data-provider="([^"]+)">', listing)
    assert eligible == sorted(eligible) and "stub-openai" in eligible

    added = client.post(
        page(tenant, "team-keys/"),
        {"group": tenant.group_id, "provider": "stub-openai", "label": "ci", "key": "sk-team-9876"},
    )
    assert added.status_code == 302
    team_key = TeamKey.objects.get(pool__group_id=tenant.group_id)
    listing = client.get(page(tenant, "team-keys/")).content.decode()
    assert "…9876" in listing and "sk-team-9876" not in listing

    toggled = client.post(
        page(tenant, "team-keys/fallback/"),
        {"group": tenant.group_id, "provider": "stub-openai", "fallback": "on"},
    )
    assert toggled.status_code == 302
    assert KeyPool.objects.get(group_id=tenant.group_id, provider="stub-openai").fallback is True

    # The pool's last key: removed by the confirmation's POST (test_team_keys_last.py).
    removed = client.post(page(tenant, f"team-keys/{team_key.pk}/remove/"), {"confirm": "1"})
    assert removed.status_code == 302
    assert not TeamKey.objects.filter(pk=team_key.pk).exists()


def test_team_key_for_an_unknown_provider_names_the_valid_ones(stub):
    install_profiles(stub.url)
    tenant = make_tenant()
    response = signed_in(tenant).post(
        page(tenant, "team-keys/"),
        {"group": tenant.group_id, "provider": "nope", "label": "x", "key": "sk-1"},
    )
    assert response.status_code == 200
    assert (
        "Team keys cannot be added for nope. Team keys can be added for: stub-anthropic, "
        "stub-openai, stub-router."
    ) in response.content.decode()
    assert not TeamKey.objects.filter(pool__group_id=tenant.group_id).exists()


def test_usage_explorer_filters_like_the_api_and_downloads_csv():
    tenant = make_tenant()
    other_group = Group.objects.create(account_id=tenant.account_id, name="second")
    store(
        journal_row(
            group_id=tenant.group_id,
            account_id=tenant.account_id,
            request_id="req-a",
            model_served="gpt-4o-mini",
            provider_cost_micro=100,
        ),
        journal_row(
            group_id=other_group.pk,
            account_id=tenant.account_id,
            request_id="req-b",
            model_requested="claude-3-5-haiku",
            model_served="claude-3-5-haiku",
            endpoint="messages",
        ),
    )
    client = signed_in(tenant)

    html = client.get(page(tenant, f"usage/?group={other_group.pk}")).content.decode()
    assert re.findall(r'data-request="([^"]+)"', html) == ["req-b"]
    html = client.get(page(tenant, "usage/?route=chat")).content.decode()
    assert re.findall(r'data-request="([^"]+)"', html) == ["req-a"]
    assert f'href="/dashboard/{tenant.account_id}/usage.csv?route=chat"' in html

    response = client.get(page(tenant, "usage.csv?route=chat"))
    rows = list(csv.DictReader(io.StringIO(streamed_body(response).decode())))
    assert [(r["request_id"], r["provider_cost_micro"]) for r in rows] == [("req-a", "100")]

    bad = client.get(page(tenant, "usage/?start=yesterday")).content.decode()
    assert "start:" in bad


def test_request_detail_shows_the_attempt_trail_and_who_paid():
    tenant = make_tenant()
    store(
        journal_row(
            group_id=tenant.group_id,
            account_id=tenant.account_id,
            request_id="req-trail",
            provider_cost_micro=2_520,
            served_by="platform",
            attempts=[
                attempt(
                    1,
                    served_by="team",
                    source="team:ci",
                    outcome="upstream_429",
                    upstream_status=429,
                    latency_ms=3,
                ),
                attempt(2),
            ],
        )
    )
    html = signed_in(tenant).get(page(tenant, "usage/req-trail/")).content.decode()
    assert re.findall(r'<td class="served-by">(\w+)</td>', html) == ["team", "platform"]
    assert '<dd id="spend">$0.00252</dd>' in html


def test_charts_draw_a_bar_per_day_and_model_with_exact_values():
    from tests.dashboard.test_charts import chart_data, values
    from usage.models import UsageLog

    tenant = make_tenant()
    store(
        journal_row(
            group_id=tenant.group_id,
            account_id=tenant.account_id,
            api_key_id=tenant.api_key_id,
            provider_cost_micro=40,
            tokens_in=3,
            tokens_out=4,
            bytes_in=100,
            bytes_out=50,
        ),
        journal_row(
            group_id=tenant.group_id,
            account_id=tenant.account_id,
            api_key_id=tenant.api_key_id,
            provider_cost_micro=2,
            bandwidth_charge_micro=1,
            model_served="gpt-4o",
            served_by="team",
            byok_tokens_in=1,
            byok_tokens_out=1,
        ),
    )
    html = signed_in(tenant).get(page(tenant, "charts/")).content.decode()
    charts = chart_data(html)

    rows = UsageLog.objects.filter(account_id=tenant.account_id)
    spend = sum(r.provider_cost_micro + r.bandwidth_charge_micro for r in rows)
    today = timezone.now().date().isoformat()
    per_day = charts["spend-day"]
    assert len(per_day["labels"]) == 30 and per_day["labels"][-1] == today  # quiet days at 0
    assert values(per_day) == {"Platform": [0] * 29 + [40], "Team keys": [0] * 29 + [3]}
    assert sum(map(sum, values(per_day).values())) == spend == 43
    assert values(charts["tokens-day"]) == {"Platform": [0] * 29 + [7], "Team keys": [0] * 29 + [2]}
    assert charts["spend-model"]["labels"] == ["gpt-4o-mini", "gpt-4o"]  # largest first
    assert values(charts["spend-model"]) == {"Spend": [40, 3]}
    assert (charts["spend-key"]["labels"], values(charts["spend-key"])) == (
        ["default"],
        {"Spend": [43]},
    )
    assert charts["spend-day"]["unit"] == "usd" and charts["tokens-day"]["unit"] == "tokens"
    # Each chart says what it shows to a screen reader, and its table has the same numbers.
    assert 'aria-label="Spend per day, last 30 days: $0.000043 in all (platform $0.00004, ' in html
    day_table = html.split('id="chart-spend-day"')[1].split("</table>")[0]
    assert (
        f'<tr><th scope="row">{today}</th><td class="num">$0.00004</td>'
        '<td class="num">$0.000003</td><td class="num">$0.000043</td></tr>'
    ) in day_table
    assert "<svg" not in html and "max $" not in html


def test_wallet_page_lists_the_ledger():
    tenant = make_tenant(wallet_micro=5_000_000)
    html = signed_in(tenant).get(page(tenant, "wallet/")).content.decode()
    assert '<p class="big" id="balance">$5.00</p>' in html
    assert re.findall(r'<td class="amount">([^<]+)</td>', html) == ["$5.00"]


def test_admin_issues_a_set_password_link():
    tenant = make_tenant()
    operator = get_user_model().objects.create_superuser("op", password=PASSWORD)
    client = Client()
    client.force_login(operator)
    membership = Membership.objects.get(account_id=tenant.account_id, role="owner")
    response = client.post(
        "/django-admin/accounts/membership/",
        {"action": "issue_password_link", "_selected_action": [membership.pk]},
        follow=True,
    )
    link = re.search(r"http://testserver(/set-password/[^\s<]+/)", response.content.decode())
    assert link is not None
    assert Client().get(link.group(1), follow=True).context["validlink"] is True


def test_a_signed_in_member_reaches_the_tenant_api_with_the_session():
    tenant = make_tenant()
    client = Client()
    owner = owner_of(tenant)
    owner.set_password(PASSWORD)
    owner.save()
    assert (
        client.post("/login/", {"username": owner.username, "password": PASSWORD}).status_code
        == 302
    )

    accounts = client.get("/api/account").json()["results"]
    assert [a["id"] for a in accounts] == [tenant.account_id]
    # Writes through the session need the CSRF token, as any session-authenticated form.
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(owner)
    refused = strict.post("/api/keys", {"group": tenant.group_id}, content_type="application/json")
    assert refused.status_code == 403


def test_overview_shows_the_period_its_history_and_the_alerts_raised():
    from billing.services import budget_periods_roll
    from tests.billing.test_budget_periods import end_period, spend, with_period

    tenant = make_tenant(budget_micro=1_000)
    with_period(Group, tenant.group_id, "daily")
    spend(tenant, 600)  # 60%: the 50% alert
    client = signed_in(tenant)

    html = client.get(page(tenant)).content.decode()
    row = html.split(f'<tr data-group="{tenant.group_id}">')[1].split("</tr>")[0]
    assert '<td class="period-spend">$0.0006</td>' in row
    assert '<td class="used">60%</td>' in row
    ends = Group.objects.get(pk=tenant.group_id).period_ends_at
    assert f"Daily, resets {ends:%Y-%m-%d %H:%M} UTC" in row
    alerts = html.split('id="alerts"')[1].split("</table>")[0]
    assert re.findall(r"<td>(\d+)%</td><td>([^<]+)</td><td>([^<]+)</td>", alerts) == [
        ("50", "$0.0006", "$0.001")
    ]

    starts, ended = end_period(Group, tenant.group_id)
    assert budget_periods_roll() == 1
    html = client.get(page(tenant)).content.decode()
    row = html.split(f'<tr data-group="{tenant.group_id}">')[1].split("</tr>")[0]
    assert '<td class="period-spend">$0.00</td>' in row
    past = html.split(f'class="past-periods" data-group="{tenant.group_id}"')[1].split("</table>")[
        0
    ]
    assert re.findall(r"<td>([^<]+)</td>", past) == [
        f"{starts:%Y-%m-%d %H:%M} UTC",
        f"{ended:%Y-%m-%d %H:%M} UTC",
        "$0.0006",
        "$0.001",
    ]


def test_times_read_in_the_accounts_zone():
    from accounts.models import Account
    from tests.billing.test_budget_periods import with_period

    tenant = make_tenant(budget_micro=1_000)
    Account.objects.filter(pk=tenant.account_id).update(time_zone="Asia/Tokyo")
    with_period(Group, tenant.group_id, "daily")

    html = signed_in(tenant).get(page(tenant)).content.decode()
    row = html.split(f'<tr data-group="{tenant.group_id}">')[1].split("</tr>")[0]
    ends = Group.objects.get(pk=tenant.group_id).period_ends_at
    local = ends.astimezone(ZoneInfo("Asia/Tokyo"))
    assert (local.hour, local.minute) == (0, 0)
    assert f"Daily, resets {local:%Y-%m-%d} 00:00 JST" in row
    today = html.split('id="spend-today"')[1].split("</div>")[0]
    assert "00:00 JST" in today


def test_usage_pages_keep_their_filters():
    tenant = make_tenant()
    store(
        *(
            journal_row(
                group_id=tenant.group_id, account_id=tenant.account_id, request_id=f"req-{i:03d}"
            )
            for i in range(51)
        )
    )
    client = signed_in(tenant)
    first = client.get(page(tenant, "usage/?route=chat")).content.decode()
    assert len(re.findall(r'data-request="', first)) == 50
    [older] = re.findall(r'href="\?route=chat&older=([0-9.]+)">older</a>', first)
    assert "newer</a>" not in first
    second = client.get(page(tenant, f"usage/?route=chat&older={older}")).content.decode()
    assert re.findall(r'data-request="([^"]+)"', second) == ["req-000"]
    assert "older</a>" not in second
    [newer] = re.findall(r'href="\?route=chat&newer=([0-9.]+)">newer</a>', second)
    back = client.get(page(tenant, f"usage/?route=chat&newer={newer}")).content.decode()
    assert re.findall(r'data-request="([^"]+)"', back) == re.findall(
        r'data-request="([^"]+)"', first
    )


def test_values_a_client_chose_are_escaped_everywhere():
    tenant = make_tenant()
    hostile = '<script>alert("x")</script>'
    store(
        journal_row(
            group_id=tenant.group_id,
            account_id=tenant.account_id,
            request_id="req-x",
            model_requested=hostile,
            model_served="",
            client_request_id="<b>id</b>",
        )
    )
    client = signed_in(tenant)
    for path in ("usage/", "charts/", "usage/req-x/"):
        html = client.get(page(tenant, path)).content.decode()
        assert hostile not in html and "<b>id</b>" not in html, path
        assert "&lt;script&gt;" in html, path
