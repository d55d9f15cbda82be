"""`make run`'s demo, one run shared by this module's tests (neither changes what the other
checks): what it prints is right for the port it runs on (every address it names is the run's,
gateway or stub, and the management command it prints, run as printed in another shell, gives
a set-password link on that port), and it serves one profile of every vendor kind on the stub:
each answers the official SDKs, streamed, through the gateway (Azure OpenAI, Bedrock, Gemini,
Vertex AI, beside OpenAI and Anthropic), and a profile of several platform keys shares its
calls."""

from __future__ import annotations

import json
import re
import subprocess

import anthropic
import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from tests.support.checkouts import MadeRun, make_env, make_run

HELLO: list[ChatCompletionMessageParam] = [{"role": "user", "content": "hello there"}]

# The demo's model of each kind (gateway/management/commands/seed_demo.py) and the path of
# the stub's route its calls must reach.
DEMO_MODELS = {
    "gpt-4o-mini": "/v1/chat/completions",
    "gpt-4o-mini-pooled": "/v1/chat/completions",
    "claude-3-5-haiku": "/v1/messages",
    "azure-gpt-4o-mini": "/azure-demo/openai/deployments/demo-4o-mini/chat/completions",
    "bedrock-haiku": "/model/anthropic.claude-3-5-haiku-20241022-v1:0/converse-stream",
    "gemini-2.5-flash": "/v1beta/models/gemini-2.5-flash:streamGenerateContent",
    "vertex-gemini-flash": (
        "/v1/projects/demo/locations/us-central1/publishers/google/models/"
        "gemini-2.5-flash:streamGenerateContent"
    ),
}


@pytest.fixture(scope="module")
def demo(module_checkout) -> MadeRun:
    return make_run(module_checkout)


def test_the_printed_lines_name_the_runs_port(demo: MadeRun):
    run = demo
    ports = {run.url.rsplit(":", 1)[1], run.stub_url.rsplit(":", 1)[1]}

    named = set(re.findall(r"(?:127\.0\.0\.1|localhost):(\d+)", run.printed))
    assert named == ports, run.printed

    [command] = [line for line in run.printed.splitlines() if "manage.py create_tenant" in line]
    # A new shell: none of the run's environment, as a reader who copies the line has.
    made = subprocess.run(
        ["bash", "-c", command], env=make_env(), capture_output=True, text=True, timeout=60
    )
    assert made.returncode == 0, made.stderr
    assert json.loads(made.stdout)["password_link"].startswith(f"{run.url}/set-password/")
    assert "TOLLGATE_PUBLIC_URL is not set" not in made.stderr


def test_the_demo_serves_a_profile_of_every_vendor_kind(demo: MadeRun, module_checkout):
    run = demo
    client = openai.OpenAI(base_url=f"{run.url}/v1", api_key=run.api_key, max_retries=0)
    listed = {model.id for model in client.models.list()}
    assert set(DEMO_MODELS) <= listed

    # The pooled profile: its own key and two sealed ones, weighted 1:2:1 (smooth: a, own, b, a).
    httpx.delete(f"{run.stub_url}/_stub/calls").raise_for_status()
    for _ in range(4):
        client.chat.completions.create(model="gpt-4o-mini-pooled", messages=HELLO)
    keys = [
        c["key"] for c in httpx.get(f"{run.stub_url}/_stub/calls").json()["calls"] if c["model"]
    ]
    own = "sk-stub-platform-demo"
    assert keys == [f"{own}-pool-a", own, f"{own}-pool-b", f"{own}-pool-a"]

    for model, path in DEMO_MODELS.items():
        httpx.delete(f"{run.stub_url}/_stub/calls").raise_for_status()
        stream = client.chat.completions.create(
            model=model,
            messages=HELLO,
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = list(stream)
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        usage = chunks[-1].usage
        assert text and usage is not None and usage.completion_tokens > 0, model
        calls = [c for c in httpx.get(f"{run.stub_url}/_stub/calls").json()["calls"] if c["model"]]
        assert [c["path"] for c in calls] == [path], model

    # And an Anthropic client on a Google model: translated both ways.
    message = anthropic.Anthropic(base_url=run.url, api_key=run.api_key, max_retries=0)
    answer = message.messages.create(
        model="vertex-gemini-flash",
        max_tokens=50,
        messages=[{"role": "user", "content": "hello there"}],
    )
    block = answer.content[0]
    assert isinstance(block, anthropic.types.TextBlock), block
    assert block.text and answer.usage.output_tokens > 0

    log = (module_checkout / "var/gateway.log").read_text()
    assert "Traceback" not in log, log


def test_the_demo_caches_answers_in_its_own_memory(demo: MadeRun):
    """No Redis under `make run`: the in-process store, with the same rules."""
    run = demo
    client = openai.OpenAI(base_url=f"{run.url}/v1", api_key=run.api_key, max_retries=0)
    httpx.delete(f"{run.stub_url}/_stub/calls").raise_for_status()
    asked = {"X-Tollgate-Cache-TTL": "60"}
    prompt: list[ChatCompletionMessageParam] = [{"role": "user", "content": "remember this answer"}]

    def ask(**create) -> str:
        raw = client.chat.completions.with_raw_response.create(
            model="gpt-4o-mini", messages=prompt, extra_headers=asked, **create
        )
        list(raw.parse()) if create.get("stream") else raw.parse()
        return raw.headers["x-tollgate-cache"]

    assert [ask(), ask(), ask(stream=True)] == ["miss", "hit", "hit"]
    calls = [c for c in httpx.get(f"{run.stub_url}/_stub/calls").json()["calls"] if c["model"]]
    assert len(calls) == 1

    # The tenant's purge reaches the gateway's memory (one process serves both planes).
    purged = httpx.post(
        f"{run.url}/api/cache/purge", headers={"Authorization": f"Token {run.api_token}"}
    )
    assert purged.status_code == 200, purged.text
    assert [ask(), ask()] == ["miss", "hit"]
