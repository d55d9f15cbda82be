"""The trace context, the sampling decision and the settings, read from the OTEL_* variables."""

from __future__ import annotations

import pytest

from core.tracing import (
    Parent,
    Sampler,
    parse_traceparent,
    sampler_from,
    settings_from,
    traceparent,
)

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
SPAN = "00f067aa0ba902b7"


def test_a_traceparent_is_read_with_its_flag_and_state():
    assert parse_traceparent(f"00-{TRACE}-{SPAN}-01".encode(), b"vendor=x") == Parent(
        int(TRACE, 16), int(SPAN, 16), True, "vendor=x"
    )
    assert parse_traceparent(f"00-{TRACE}-{SPAN}-00") == Parent(
        int(TRACE, 16), int(SPAN, 16), False, ""
    )


@pytest.mark.parametrize(
    "value",
    [
        None,
        b"",
        f"00-{'0' * 32}-{SPAN}-01",  # an all-zero trace id is invalid
        f"00-{TRACE}-{'0' * 16}-01",
        f"01-{TRACE}-{SPAN}-01-extra",
        f"00-{TRACE.upper()}-{SPAN}-01",  # W3C ids are lowercase hex
        "garbage",
    ],
)
def test_a_malformed_traceparent_is_ignored(value):
    assert parse_traceparent(value) is None


def test_a_traceparent_is_written_as_w3c_says():
    assert traceparent(int(TRACE, 16), int(SPAN, 16)) == f"00-{TRACE}-{SPAN}-01"
    assert traceparent(1, 2, sampled=False) == f"00-{1:032x}-{2:016x}-00"


@pytest.mark.parametrize(
    ("name", "arg", "expected"),
    [
        (None, None, Sampler(1.0, True)),
        ("always_on", None, Sampler(1.0, False)),
        ("always_off", None, Sampler(0.0, False)),
        ("traceidratio", "0.01", Sampler(0.01, False)),
        ("parentbased_traceidratio", "0.25", Sampler(0.25, True)),
        ("parentbased_always_off", None, Sampler(0.0, True)),
        ("traceidratio", "bad", Sampler(1.0, False)),
        ("traceidratio", "7", Sampler(1.0, False)),
        ("jaeger_remote", None, Sampler(1.0, True)),  # unknown: the default
    ],
)
def test_the_sampler_is_read_from_the_standard_variables(name, arg, expected):
    assert sampler_from(name, arg) == expected


def test_a_ratio_compares_the_trace_ids_low_64_bits_as_the_sdk_does():
    quarter = Sampler(0.25, parent_based=False)
    assert quarter.sampled((7 << 64) | (2**62 - 1), None) is True
    assert quarter.sampled(2**62, None) is False
    assert Sampler(0.0, False).sampled(0, None) is False


def test_a_parent_based_sampler_follows_the_parents_flag():
    assert Sampler(0.0, True).sampled(1, True) is True
    assert Sampler(1.0, True).sampled(1, False) is False
    assert Sampler(0.0, False).sampled(1, True) is False  # not parent-based: the ratio decides


def test_tracing_is_on_only_with_an_endpoint_and_the_sdk_not_disabled():
    assert settings_from({}).enabled is False
    assert settings_from({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}).enabled is True
    assert settings_from({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c/v1/traces"}).enabled
    disabled = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SDK_DISABLED": "true"}
    assert settings_from(disabled).enabled is False
    ratio = {"OTEL_EXPORTER_OTLP_ENDPOINT": "x", "OTEL_TRACES_SAMPLER": "traceidratio"}
    assert settings_from({**ratio, "OTEL_TRACES_SAMPLER_ARG": "0.5"}).sampler == Sampler(0.5, False)
