"""The charts' per-model table: names no model answers to are one row, not a row each."""

from __future__ import annotations

from dashboard.charts import group_unknown
from usage.selectors import usage_zero_totals

KNOWN = frozenset({"gpt-4o-mini", "stub-openai/gpt-4o-mini", "mini"})


def totals(model: str, requests: int, errors: int, **more: int) -> dict:
    return {**usage_zero_totals(), "model": model, "requests": requests, "errors": errors, **more}


def test_misspelt_names_whose_requests_all_failed_are_summed_as_unknown_models():
    rows = [
        totals("", 2, 0, tokens_in=0),  # a web action
        totals("gpt-4o-mini", 5, 1, tokens_in=70),
        totals("gpt-4o-mni", 3, 3, bytes_in=300),
        totals("gtp-4o", 1, 1, bytes_in=90),
    ]

    grouped = group_unknown(rows, KNOWN)

    assert [row["model"] for row in grouped] == [
        "",
        "gpt-4o-mini",
        "unknown models (4 requests)",
    ]
    unknown = grouped[-1]
    assert (unknown["requests"], unknown["errors"], unknown["bytes_in"]) == (4, 4, 390)
    assert unknown["names"] == ["gpt-4o-mni", "gtp-4o"] and unknown["unknown"] is True


def test_a_name_that_served_a_request_stays_a_model_even_if_no_profile_offers_it_now():
    rows = [totals("retired-model", 2, 1), totals("mini", 1, 1), totals("typo", 1, 1)]

    grouped = group_unknown(rows, KNOWN)

    assert [row["model"] for row in grouped] == [
        "retired-model",
        "mini",  # an alias, refused (say, a budget): still a model
        "unknown models (1 request)",
    ]
