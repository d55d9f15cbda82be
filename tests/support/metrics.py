"""A gateway's /metrics, scraped and parsed."""

from __future__ import annotations

import httpx


def metric_samples(url: str) -> dict[tuple[str, tuple], float]:
    """Scrape /metrics: {(sample name, sorted label items): value}."""
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(f"{url}/metrics").text
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def metric(url: str, name: str, **labels: str) -> float:
    """Return one sample of a gateway's /metrics (0.0 when it was never set)."""
    return metric_samples(url).get((name, tuple(sorted(labels.items()))), 0.0)
