"""An image reaches every platform vendor as that vendor takes it, from either client shape.

The `make run` demo's profiles of Azure, Bedrock, Gemini and Vertex (seed_demo), with their
keys, on the stub; the stub counts 85 prompt tokens per image in every vendor shape, and
records the body it received, so the bytes are checked where each vendor reads them.
"""

from __future__ import annotations

import base64

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
