"""The platform vendors (Azure, Bedrock, Gemini, Vertex) side by side: an image from either
client shape reaches each as it takes it, and each one's stub route takes scripted faults.

The `make run` demo's profiles of them (seed_demo), with their keys, on the stub; the stub
counts 85 prompt tokens per image in every vendor shape, and records the body it received,
so the bytes are checked where each vendor reads them.
"""

from __future__ import annotations

import base64

import openai
import pytest

from gateway.management.commands.seed_demo import demo_platform_key, demo_profiles
from providers.models import ProviderProfile
from providers.services import profile_set_platform_key
from tests.support.services import requires_postgres, requires_redis
from tests.support.stacks import Stack, own_stack

pytestmark = [requires_postgres, requires_redis, pytest.mark.timeout(60)]

VENDOR_KINDS = ("azure", "bedrock", "gemini", "vertex")
# A 1x1 PNG.
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)
PNG_B64 = base64.b64encode(PNG).decode()
IMAGE_TOKENS = 85


def image_seen(kind: str, body: dict) -> str:
    """Return the base64 image the stub received, where this vendor's API carries it."""
    if kind == "azure":
        part = body["messages"][0]["content"][1]
        return part["image_url"]["url"].removeprefix("data:image/png;base64,")
    if kind == "bedrock":
        block = body["messages"][0]["content"][1]["image"]
        assert block["format"] == "png"
        return block["source"]["bytes"]
    part = body["contents"][0]["parts"][1]["inlineData"]
    assert part["mimeType"] == "image/png"
    return part["data"]


@pytest.fixture(scope="module")
def vendors_gateway(module_gateways):
    return module_gateways()


@pytest.fixture
def vstack(transactional_db, vendors_gateway, stub) -> Stack:
    spec = [p for p in demo_profiles(stub.url) if p["kind"] in VENDOR_KINDS]
    stack = own_stack(vendors_gateway, stub, spec)
    for profile in ProviderProfile.objects.filter(kind__in=VENDOR_KINDS):
        profile_set_platform_key(profile=profile, api_key=demo_platform_key(profile.kind, stub.url))
        profile.save()
    vendors_gateway.reload()
    return stack


def models(spec_kinds=VENDOR_KINDS) -> dict[str, str]:
    return {
        profile["models"][0]["name"]: profile["kind"]
        for profile in demo_profiles("http://stub")
        if profile["kind"] in spec_kinds
    }


def test_an_image_from_an_openai_client_reaches_each_vendor_whole(vstack):
    tenant = vstack.tenant()
    client = vstack.openai(tenant)
    for model, kind in models().items():
        vstack.stub.clear()
        answer = client.chat.completions.create(
            model=model,
            messages=[
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "describe this"},
                        {
                            "type": "image_url",
                            "image_url": {"url": f"data:image/png;base64,{PNG_B64}"},
                        },
                    ],
                }
            ],
        )
        assert answer.usage.prompt_tokens == 2 + IMAGE_TOKENS, model
        [call] = vstack.stub.vendor_calls()
        assert image_seen(kind, call["body"]) == PNG_B64, model


def test_an_image_from_an_anthropic_client_reaches_each_vendor_whole(vstack):
    tenant = vstack.tenant()
    client = vstack.anthropic(tenant)
    for model, kind in models().items():
        vstack.stub.clear()
        answer = client.messages.create(
            model=model,
            max_tokens=50,
            messages=[
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "describe this"},
                        {
                            "type": "image",
                            "source": {
                                "type": "base64",
                                "media_type": "image/png",
                                "data": PNG_B64,
                            },
                        },
                    ],
                }
            ],
        )
        assert answer.usage.input_tokens == 2 + IMAGE_TOKENS, model
        [call] = vstack.stub.vendor_calls()
        assert image_seen(kind, call["body"]) == PNG_B64, model


def test_each_vendors_stub_route_takes_scripted_faults_as_the_gateway_expects(vstack):
    tenant = vstack.tenant()
    client = vstack.openai(tenant)
    hello = [{"role": "user", "content": "hello there"}]
    for model in models():
        # A 500: the gateway tries once more, and the second call serves.
        vstack.stub.clear()
        vstack.stub.faults({"kind": "500"})
        answer = client.chat.completions.create(model=model, messages=hello)
        assert answer.usage.completion_tokens == 8, model
        assert len(vstack.stub.vendor_calls()) == 2, model

        # Cut after two tokens: they reach the client, then our error; never retried.
        vstack.stub.clear()
        vstack.stub.faults({"kind": "fail_after_tokens", "after_tokens": 2})
        deltas: list[str] = []
        with pytest.raises(openai.APIError) as broke:
            for chunk in client.chat.completions.create(model=model, messages=hello, stream=True):
                if chunk.choices and chunk.choices[0].delta.content:
                    deltas.append(chunk.choices[0].delta.content)
        assert broke.value.body["code"] == "LM-5001", model
        assert "".join(deltas) == "Hello from", model
        assert len(vstack.stub.vendor_calls()) == 1, model
