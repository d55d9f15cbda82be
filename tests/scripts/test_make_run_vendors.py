"""`make run`'s demo serves one profile of every vendor kind on the stub: each answers the
official SDKs, streamed, through the gateway (Azure OpenAI, Bedrock, Gemini, Vertex AI,
beside OpenAI and Anthropic), and a profile of several platform keys shares its calls."""

from __future__ import annotations

import anthropic
import httpx
import openai

from tests.support.checkouts import make_run

HELLO = [{"role": "user", "content": "hello there"}]

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


def test_the_demo_serves_a_profile_of_every_vendor_kind(checkout):
    run = make_run(checkout)
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
        assert text and chunks[-1].usage.completion_tokens > 0, model
        calls = [c for c in httpx.get(f"{run.stub_url}/_stub/calls").json()["calls"] if c["model"]]
        assert [c["path"] for c in calls] == [path], model

    # And an Anthropic client on a Google model: translated both ways.
    message = anthropic.Anthropic(base_url=run.url, api_key=run.api_key, max_retries=0)
    answer = message.messages.create(
        model="vertex-gemini-flash",
        max_tokens=50,
        messages=[{"role": "user", "content": "hello there"}],
    )
    assert answer.content[0].text and answer.usage.output_tokens > 0

    log = (checkout / "var/gateway.log").read_text()
    assert "Traceback" not in log, log
