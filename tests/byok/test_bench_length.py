"""A refused team key through the real gateway process and the stub vendor: the requests
after it skip the key, and its bench in Redis (shared by every replica) lasts exactly its
rule: max(Retry-After, 30 s) for a 429, 10 minutes for a 401. The bench's end is read from
Redis (PEXPIRETIME) against Redis's own clock around the request that benched it, so no test
waits it out."""

from __future__ import annotations

import pytest
import redis
from django.conf import settings

from byok.models import TeamKey
from tests.byok.helpers import team_keys
from tests.support.services import requires_redis
from tests.support.waits import wait_until

pytestmark = requires_redis
HELLO = [{"role": "user", "content": "hello there"}]
BENCH = "tollgate:bench:{}"  # byok/routing.py's key of a benched team key


def server_ms(client: redis.Redis) -> int:
    seconds, micros = client.time()
    return seconds * 1000 + micros // 1000


@pytest.mark.parametrize(
    ("fault", "bench_s", "status"),
    [
        ({"kind": "429", "retry_after": 5}, 30, "active"),
        ({"kind": "429", "retry_after": 90}, 90, "active"),
        ({"kind": "401"}, 600, "failing"),
    ],
    ids=["429-retry-after-5", "429-retry-after-90", "401"],
)
def test_a_refused_team_key_is_skipped_for_exactly_its_bench(stack, fault, bench_s, status):
    tenant = stack.tenant()
    ids = team_keys(stack, tenant, "stub-openai", ["sk-team-a", "sk-team-b"])
    stack.stub.faults({**fault, "match": {"key": "sk-team-a"}})
    client = stack.openai(tenant)
    shared = redis.Redis.from_url(settings.REDIS_URL)

    before_ms = server_ms(shared)
    client.chat.completions.create(model="gpt-4o-mini", messages=HELLO)  # a refused, b serves
    after_ms = server_ms(shared)
    client.chat.completions.create(model="gpt-4o-mini", messages=HELLO)
    client.chat.completions.create(model="gpt-4o-mini", messages=HELLO)  # a's turn: benched

    assert [c["key"] for c in stack.stub.vendor_calls()] == [
        "sk-team-a",
        "sk-team-b",
        "sk-team-b",
        "sk-team-b",
    ]
    # Benched when the first request was served: its end is bench_s after that moment.
    ends_ms = shared.pexpiretime(BENCH.format(ids[0]))
    assert before_ms + bench_s * 1000 <= ends_ms <= after_ms + bench_s * 1000, (
        ends_ms - before_ms,
        ends_ms - after_ms,
    )
    assert shared.get(BENCH.format(ids[0])) == status.encode()
    assert shared.exists(BENCH.format(ids[1])) == 0
    row = wait_until(
        lambda: TeamKey.objects.filter(pk=ids[0], benched_until__isnull=False).first(),
        what="the key's bench recorded",
    )
    assert row.status == status
    shared.close()
