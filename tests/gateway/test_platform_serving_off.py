"""Platform serving switched off (GATEWAY_PTB_ENABLED=false: S1's internal deployment), on a
real gateway, over every /v1 route of its route table: a team-key request is served on the
team's key, a request only the platform could pay for is refused LM-3021 (429, nothing sent
upstream), and the routes no one pays for answer both alike.

The routes are read from gateway.asgi's table, so a route added there without a case here
fails `test_every_v1_route_has_a_case`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import anthropic
import httpx
import openai
import pytest
from anthropic.types import MessageParam
from openai.types.chat import ChatCompletionMessageParam

from gateway import asgi
from tests.byok.helpers import team_keys
from tests.support.profiles import api_profiles
from tests.support.stacks import Stack, own_stack
from tests.support.testsite import TestSite
from tests.support.web import WEB_ENV, install_web_profiles, web_profiles

TEAM = {
    "stub-openai": "sk-team-openai-1111",
    "stub-anthropic": "sk-team-anthropic-2222",
    "stub-render": "sk-team-render-3333",
    "stub-search": "sk-team-search-4444",
}
HI: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Hi"}]
HI_ANTHROPIC: list[MessageParam] = [{"role": "user", "content": "Hi"}]  # the same, as Anthropic's
REFUSED = (429, "LM-3021")


@dataclass
class Setup:
    stack: Stack
    site: TestSite
    team: object  # a tenant whose group has a team key for every vendor
    platform: object  # a tenant with none: only the platform could pay


@pytest.fixture(scope="module")
def site():
    with TestSite() as test_site:
        yield test_site


@pytest.fixture(scope="module")
def ptb_off_gateway(module_gateways):
    return module_gateways(GATEWAY_PTB_ENABLED="false", **WEB_ENV)


@pytest.fixture
def setup(transactional_db, ptb_off_gateway, stub, site) -> Setup:
    stack = own_stack(ptb_off_gateway, stub, api_profiles(stub.url))
    install_web_profiles(web_profiles(stub.url))
    stack.gateway.reload()
    team = stack.tenant(wallet_micro=100_000_000)
    for provider, secret in TEAM.items():
        team_keys(stack, team, provider, [secret])
    stub.clear()
    site.clear()
    return Setup(stack, site, team, stack.tenant(wallet_micro=100_000_000))


def answer(call: Callable[[], object]) -> tuple[int, str | None]:
    """Run an SDK call: (200, None) when served, else (status, our error code)."""
    try:
        call()
    except openai.APIStatusError as exc:
        return exc.status_code, exc.code
    except anthropic.APIStatusError as exc:
        assert isinstance(exc.body, dict), exc.body
        return exc.status_code, exc.body["error"]["code"]
    return 200, None


def code(response: httpx.Response) -> tuple[int, str | None]:
    if response.status_code < 300:
        return response.status_code, None
    return response.status_code, response.json()["error"]["code"]


def oai(s: Setup, tenant) -> openai.OpenAI:
    return s.stack.openai(tenant)


def ant(s: Setup, tenant) -> anthropic.Anthropic:
    return s.stack.anthropic(tenant)


def web(s: Setup, tenant, path: str, body: dict, method: str = "POST") -> httpx.Response:
    return httpx.request(
        method,
        f"{s.stack.url}/v1/web/{path}",
        json=body if method == "POST" else None,
        headers={"Authorization": f"Bearer {tenant.api_key}"},
        timeout=30,
    )


# ---------------------------------------------------------------- the routes


def chat(s: Setup, tenant) -> tuple[int, str | None]:
    client = oai(s, tenant)
    plain = answer(lambda: client.chat.completions.create(model="gpt-4o-mini", messages=HI))

    def streamed():
        stream = client.chat.completions.create(model="gpt-4o-mini", messages=HI, stream=True)
        assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices)

    assert answer(streamed) == plain  # streamed and not, alike
    return plain


def messages(s: Setup, tenant) -> tuple[int, str | None]:
    client = ant(s, tenant)
    plain = answer(
        lambda: client.messages.create(
            model="claude-3-5-haiku", max_tokens=50, messages=HI_ANTHROPIC
        )
    )

    def streamed():
        with client.messages.stream(
            model="claude-3-5-haiku", max_tokens=50, messages=HI_ANTHROPIC
        ) as stream:
            assert "".join(stream.text_stream)

    assert answer(streamed) == plain
    return plain


def count_tokens(s: Setup, tenant) -> tuple[int, str | None]:
    """Counting is never billed: a team key's count is the vendor's, anyone else's is
    Tollgate's estimate (docs/tenant-api.md), never a refusal."""
    raw = ant(s, tenant).messages.with_raw_response.count_tokens(
        model="claude-3-5-haiku", messages=HI_ANTHROPIC
    )
    expected = "vendor" if tenant is s.team else "estimate"
    assert raw.headers["x-tollgate-count"] == expected
    return 200, None


def responses(s: Setup, tenant) -> tuple[int, str | None]:
    client = oai(s, tenant)
    plain = answer(lambda: client.responses.create(model="gpt-4o-mini", input="Hi"))

    def streamed():
        with client.responses.stream(model="gpt-4o-mini", input="Hi") as stream:
            assert "".join(e.delta for e in stream if e.type == "response.output_text.delta")

    assert answer(streamed) == plain
    return plain


def embeddings(s: Setup, tenant) -> tuple[int, str | None]:
    client = oai(s, tenant)
    return answer(
        lambda: client.embeddings.create(model="text-embedding-3-small", input=["one", "two"])
    )


def moderations(s: Setup, tenant) -> tuple[int, str | None]:
    client = oai(s, tenant)
    return answer(
        lambda: client.moderations.create(model="omni-moderation-latest", input=["one", "two"])
    )


def models(s: Setup, tenant) -> tuple[int, str | None]:
    """Listing pays no one: both keys see the models."""
    listed = [m.id for m in oai(s, tenant).models.list()]
    assert "gpt-4o-mini" in listed and "claude-3-5-haiku" in listed
    return 200, None


def stored_response(method: str):
    def run(s: Setup, tenant) -> tuple[int, str | None]:
        """No response is kept: 404 LM-2004 for any id, whoever asks (after the key)."""
        return code(
            httpx.request(
                method,
                f"{s.stack.url}/v1/responses/resp_123",
                headers={"Authorization": f"Bearer {tenant.api_key}"},
            )
        )

    return run


def scrape(s: Setup, tenant) -> tuple[int, str | None]:
    rendered = code(web(s, tenant, "scrape", {"url": f"{s.site.url}/js", "render_js": True}))
    # Our own fetcher is the platform's: a plain scrape goes on to the team's renderer.
    plain = web(s, tenant, "scrape", {"url": f"{s.site.url}/"})
    assert code(plain) == rendered
    if tenant is s.team:
        assert (plain.json()["provider"], plain.json()["served_by"]) == ("stub-render", "team")
    return rendered


def search(s: Setup, tenant) -> tuple[int, str | None]:
    return code(web(s, tenant, "search", {"query": "gateways", "max_results": 2}))


def crawl(s: Setup, tenant) -> tuple[int, str | None]:
    queued = web(s, tenant, "crawl", {"url": f"{s.site.url}/", "render_js": True, "max_pages": 1})
    return (200, None) if queued.status_code == 202 else code(queued)


def job(method: str):
    def run(s: Setup, tenant) -> tuple[int, str | None]:
        """A job is read and cancelled by its owner: that pays no one."""
        from accounts.models import Group
        from webfetch.jobs import create_job

        group = Group.objects.select_related("account").get(pk=tenant.group_id)
        made = create_job(
            account=group.account,
            group=group,
            api_key=None,
            seed_url=f"{s.site.url}/",
            max_pages=1,
            max_depth=0,
        )
        return code(web(s, tenant, f"jobs/{made.public_id}", {}, method))

    return run


SERVED = (200, None)
NOT_KEPT = (404, "LM-2004")
# route: (its case, what a team key gets, what a key only the platform could pay for gets)
CASES = {
    ("POST", "/v1/chat/completions"): (chat, SERVED, REFUSED),
    ("POST", "/v1/messages"): (messages, SERVED, REFUSED),
    ("POST", "/v1/messages/count_tokens"): (count_tokens, SERVED, SERVED),  # never billed
    ("POST", "/v1/responses"): (responses, SERVED, REFUSED),
    ("GET", "/v1/responses/{id}"): (stored_response("GET"), NOT_KEPT, NOT_KEPT),
    ("DELETE", "/v1/responses/{id}"): (stored_response("DELETE"), NOT_KEPT, NOT_KEPT),
    ("POST", "/v1/embeddings"): (embeddings, SERVED, REFUSED),
    ("POST", "/v1/moderations"): (moderations, SERVED, REFUSED),
    ("GET", "/v1/models"): (models, SERVED, SERVED),
    ("POST", "/v1/web/scrape"): (scrape, SERVED, REFUSED),
    ("POST", "/v1/web/search"): (search, SERVED, REFUSED),
    ("POST", "/v1/web/crawl"): (crawl, SERVED, REFUSED),
    ("GET", "/v1/web/jobs/{id}"): (job("GET"), SERVED, SERVED),
    ("DELETE", "/v1/web/jobs/{id}"): (job("DELETE"), SERVED, SERVED),
}


def v1_routes() -> set[tuple[str, str]]:
    """Every /v1 route of the gateway's table, its id-taking prefixes as `{id}`."""
    routes = {key for key in asgi.ROUTES if key[1].startswith("/v1/")}
    routes |= {(m, asgi.STORED_RESPONSES + "{id}") for m in ("GET", "DELETE")}
    routes |= {
        (m, prefix + "{id}")
        for prefix in asgi.JOB_ROUTES
        if prefix.startswith("/v1/")
        for m in ("GET", "DELETE")
    }
    return routes


def test_every_v1_route_has_a_case():
    assert sorted(v1_routes()) == sorted(CASES)


@pytest.mark.parametrize("route", sorted(CASES), ids=" ".join)
def test_team_keys_are_served_and_platform_paid_requests_refused(setup, route):
    run, team_gets, platform_gets = CASES[route]

    by_team = run(setup, setup.team)
    team_calls = setup.stack.stub.calls()
    setup.stack.stub.clear()
    setup.site.clear()
    by_platform = run(setup, setup.platform)
    platform_calls = setup.stack.stub.calls()

    assert (by_team, by_platform) == (team_gets, platform_gets)
    # Whatever reached a vendor went with a team key; a refusal reached none.
    assert {c.get("key") for c in team_calls} <= set(TEAM.values())
    if platform_gets == REFUSED:
        assert (platform_calls, setup.site.hits) == ([], [])  # not even our own fetcher
