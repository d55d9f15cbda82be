"""Under `make run` (one embedded process serving both planes: SQLite, no Redis, the stub) a
team key added or removed, from the tenant API or from the dashboard, is live for the very
next request: the write returns only once the gateway's pools have it."""

from __future__ import annotations

import httpx
import openai
from openai.types.chat import ChatCompletionMessageParam

from tests.support.browser import ARTIFACTS, open_page, requires_chromium
from tests.support.checkouts import MadeRun, make_run

HELLO: list[ChatCompletionMessageParam] = [{"role": "user", "content": "hello there"}]


def served_by(run: MadeRun) -> str | None:
    """Send one completion; return the vendor key the stub saw it with, or the refusal code."""
    httpx.delete(f"{run.stub_url}/_stub/calls").raise_for_status()
    client = openai.OpenAI(base_url=f"{run.url}/v1", api_key=run.api_key, max_retries=0)
    try:
        client.chat.completions.create(model="gpt-4o-mini", messages=HELLO)
    except openai.APIStatusError as refused:
        assert isinstance(refused.body, dict), refused.body
        return refused.body["code"]
    calls = httpx.get(f"{run.stub_url}/_stub/calls").json()["calls"]
    [key] = [call["key"] for call in calls if call["model"] is not None]
    return key


@requires_chromium
def test_team_key_changes_are_live_for_the_next_request(checkout, browser, request):
    run = make_run(checkout)
    api = httpx.Client(base_url=run.url, headers={"Authorization": f"Token {run.api_token}"})
    [group] = api.get("/api/groups").json()["results"]
    byok = f"/admin/groups/{group['id']}/byok"
    platform_key = served_by(run)
    assert platform_key is not None and platform_key.startswith("sk-")

    # The tenant API: add, then delete.
    added = api.post(f"{byok}/stub-openai/keys", json={"label": "api", "key": "sk-team-api-1"})
    assert added.status_code == 201, added.text
    assert served_by(run) == "sk-team-api-1"
    assert api.delete(f"{byok}/keys/{added.json()['id']}").status_code == 204
    assert served_by(run) == "LM-3021"  # the pool is empty and its fallback is off

    # The dashboard: the owner adds a key, then removes it.
    page = open_page(browser, ARTIFACTS / "make-run" / request.node.name)
    try:
        page.goto(f"{run.url}/login/")
        page.fill("input[name=username]", run.owner[0])
        page.fill("input[name=password]", run.owner[1])
        page.click("button[type=submit]")
        page.click("text=Team keys")
        if not page.is_visible("#add-team-key"):  # folded away once a pool exists
            page.click("#add-team-key-box summary")
        page.select_option("#add-team-key select[name=provider]", "stub-openai")
        page.fill("#add-team-key input[name=label]", "dashboard")
        page.fill("#add-team-key input[name=key]", "sk-team-dash-2")
        page.click("#add-team-key button[type=submit]")
        page.wait_for_selector("[data-team-key]")
        page.shot("1-added")
        assert served_by(run) == "sk-team-dash-2"

        page.click("[data-team-key] >> text=Remove")  # the pool's last key: asked first
        page.click("#confirm-team-key-remove button[type=submit]")
        page.wait_for_selector("text=removed")
        page.shot("2-removed")
        assert served_by(run) == "LM-3021"
    finally:
        page.context.close()

    log = (checkout / "var/gateway.log").read_text()
    assert "config reload failed" not in log and "Traceback" not in log, log
