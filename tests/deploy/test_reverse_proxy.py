"""docs/production.md's nginx block, run by Debian's nginx in front of a real gateway and a
real control plane (the two `config.asgi` apps, each its own process): the block is read from
the doc, its TLS lines swapped for a plain listen on a free port and its upstreams for the
test's processes, nothing else changed. Driven with the official SDKs on a base URL with and
without /v1, a browser-like sign-in on the dashboard and the tenant API's paginated links."""

from __future__ import annotations

import re
import shutil

import anthropic
import httpx
import openai
import pytest

from accounts.models import Membership
from tests.support.nginx import NGINX, Nginx, documented_block, served_on
from tests.support.processes import Gateway, free_port, start_gateway
from tests.support.profiles import install_profiles
from tests.support.services import (
    clear_shared_state,
    requires_postgres,
    requires_redis,
    unavailable,
)
from tests.support.tenants import make_tenant

pytestmark = [requires_postgres, requires_redis]

PASSWORD = "owner-password-behind-nginx"


@pytest.fixture(scope="module")
def proxy(tmp_path_factory, django_db_setup, django_db_blocker, stub):
    """The documented nginx in front of a gateway and a control plane of this module's own."""
    if shutil.which(NGINX) is None:
        unavailable(f"needs nginx at {NGINX} (Debian package nginx-light)")
    port = free_port()
    public = f"https://127.0.0.1:{port}"  # what clients of the documented proxy use
    planes: list[Gateway] = []
    nginx = None
    try:
        planes.append(
            start_gateway(tmp_path_factory.mktemp("gw"), app="config.asgi:gateway_application")
        )
        # Behind a TLS proxy, as production is: Django trusts its X-Forwarded-Proto.
        planes.append(
            start_gateway(
                tmp_path_factory.mktemp("control"),
                app="config.asgi:control_application",
                TOLLGATE_BEHIND_TLS_PROXY="true",
                TOLLGATE_PUBLIC_URL=public,
            )
        )
        block = served_on(
            documented_block(), port=port, gateway=planes[0].url, control=planes[1].url
        )
        nginx = Nginx(tmp_path_factory.mktemp("nginx"), block, port)
        yield nginx, *planes
    finally:
        if nginx is not None:
            nginx.stop()
        for plane in planes:
            plane.stop()


@pytest.fixture
def planes(transactional_db, proxy, stub):
    nginx, gateway, control = proxy
    stub.clear()
    clear_shared_state()
    install_profiles(stub.url)
    gateway.reload()
    return nginx.url, gateway, control


def test_the_sdks_work_through_nginx_on_the_documented_base_urls(planes):
    url, _, _ = planes
    tenant = make_tenant()
    client = openai.OpenAI(base_url=f"{url}/v1", api_key=tenant.api_key, max_retries=0)
    ask = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "three words here"}]}

    completion = client.chat.completions.create(**ask)
    stream = client.chat.completions.create(
        **ask, stream=True, stream_options={"include_usage": True}
    )
    chunks = list(stream)

    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens) == (3, 8)
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert streamed == completion.choices[0].message.content
    assert (chunks[-1].usage.prompt_tokens, chunks[-1].usage.completion_tokens) == (3, 8)

    claude = anthropic.Anthropic(base_url=url, api_key=tenant.api_key, max_retries=0)
    message = claude.messages.create(
        model="claude-3-5-haiku",
        max_tokens=50,
        messages=[{"role": "user", "content": "three words here"}],
    )
    with claude.messages.stream(
        model="claude-3-5-haiku",
        max_tokens=50,
        messages=[{"role": "user", "content": "three words here"}],
    ) as events:
        text = "".join(events.text_stream)
        final = events.get_final_message()
    assert text == message.content[0].text
    assert (final.usage.input_tokens, final.usage.output_tokens) == (
        message.usage.input_tokens,
        message.usage.output_tokens,
    )


def test_a_base_url_without_v1_reads_json_naming_the_base_urls(planes):
    url, _, control = planes
    tenant = make_tenant()
    # The proxy says https (X-Forwarded-Proto), as a client of the documented one uses.
    public = url.replace("http://", "https://")
    named = f"Point the OpenAI SDK at base URL {public}/v1 and the Anthropic SDK at {public} "

    # The OpenAI SDK given the bare host asks for /chat/completions: nginx sends it to the
    # gateway, whose answer the SDK's exception shows.
    bare = openai.OpenAI(base_url=url, api_key=tenant.api_key, max_retries=0)
    with pytest.raises(openai.NotFoundError) as missing:
        bare.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}]
        )
    assert missing.value.body["code"] == "LM-2004"
    assert "The base URL is missing /v1." in str(missing.value) and named in str(missing.value)
    with pytest.raises(openai.NotFoundError) as listing:
        bare.models.list()
    assert named in listing.value.body["message"]

    # The Anthropic SDK given .../v1 adds its own: /v1/v1/messages, an unknown gateway route.
    doubled = anthropic.Anthropic(base_url=f"{url}/v1", api_key=tenant.api_key, max_retries=0)
    with pytest.raises(anthropic.BadRequestError) as twice:
        doubled.messages.create(
            model="claude-3-5-haiku", max_tokens=10, messages=[{"role": "user", "content": "hi"}]
        )
    assert "ends in /v1 and the SDK added another" in str(twice.value)
    assert named in str(twice.value)

    # On the control plane's own address a model path is JSON too, naming the public URL.
    for path in ("/v1/chat/completions", "/chat/completions", "/messages", "/embeddings"):
        answer = httpx.post(f"{control.url}{path}", json={"model": "gpt-4o-mini"})
        assert answer.headers["content-type"] == "application/json", path
        error = answer.json()["error"]
        assert (answer.status_code, error["code"]) == (404, "LM-2004"), path
        assert error["message"].startswith(f"No route POST {path} here: this is Tollgate's")
        assert named in error["message"], path
    for path in ("/models", "/responses/resp_1", "/v1/models"):
        answer = httpx.get(f"{control.url}{path}")
        assert (answer.status_code, answer.json()["error"]["code"]) == (404, "LM-2004"), path
    on_control = openai.OpenAI(base_url=control.url, api_key=tenant.api_key, max_retries=0)
    with pytest.raises(openai.NotFoundError) as there:
        on_control.embeddings.create(model="text-embedding-3-small", input="hi")
    assert named in str(there.value)


def test_the_dashboard_and_the_tenant_api_work_through_nginx(planes):
    url, _, _ = planes
    tenant = make_tenant()
    owner = Membership.objects.get(account_id=tenant.account_id, role="owner").user
    owner.set_password(PASSWORD)
    owner.save()

    # A browser over TLS on a non-443 port: its Origin carries the port, which Django
    # compares with the Host nginx passes on.
    origin = url.replace("http://", "https://")
    # The gateway's health (the control plane's names its plane); the metrics stay inside.
    assert httpx.get(f"{url}/healthz").json() == {"status": "ok"}
    assert httpx.get(f"{url}/metrics").status_code == 404
    browser = httpx.Client(base_url=url, timeout=15)
    assert browser.get("/").headers["location"] == "/dashboard/"
    page = browser.get("/login/")
    assert page.status_code == 200 and "Sign in" in page.text
    css = browser.get("/static/dashboard/dashboard.css")
    assert (css.status_code, css.headers["content-type"]) == (200, 'text/css; charset="utf-8"')
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
    signed_in = browser.post(
        "/login/",
        data={"csrfmiddlewaretoken": token, "username": owner.username, "password": PASSWORD},
        headers={"Origin": origin, "Referer": f"{origin}/login/"},
    )
    assert (signed_in.status_code, signed_in.headers["location"]) == (302, "/dashboard/")
    assert browser.get("/dashboard/", follow_redirects=True).status_code == 200

    # The tenant API; a paginated list's `next` keeps the host's port (and the client's https).
    api = httpx.Client(
        base_url=url, headers={"Authorization": f"Token {tenant.api_token}"}, timeout=15
    )
    assert [a["id"] for a in api.get("/api/account").json()["results"]] == [tenant.account_id]
    first = api.get("/api/audit", params={"limit": 1}).json()
    assert first["next"].startswith(f"{origin}/api/audit?"), first["next"]
    rest = api.get(first["next"].replace(origin, url)).json()
    assert rest["results"] and rest["results"][0]["seq"] < first["results"][0]["seq"]
