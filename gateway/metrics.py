"""Prometheus metrics of a gateway process (served at /metrics)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

REGISTRY = CollectorRegistry(auto_describe=True)

REQUESTS = Counter(
    "tollgate_requests_total",
    "Requests by route, status and code.",
    ["route", "status", "code"],
    registry=REGISTRY,
)
UPSTREAM_LATENCY = Histogram(
    "tollgate_upstream_latency_seconds",
    "Upstream call latency to answer or first chunk.",
    ["provider"],
    registry=REGISTRY,
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
)
IN_FLIGHT = Gauge("tollgate_in_flight", "Requests in flight in this process.", registry=REGISTRY)
CIRCUIT_STATE = Gauge(
    "tollgate_circuit_state",
    "Platform breaker state: 0 closed, 1 half-open, 2 open.",
    ["provider", "model"],
    registry=REGISTRY,
)
REDIS_DEGRADED = Gauge(
    "tollgate_redis_degraded",
    "1 while Redis is unreachable and state is per-process.",
    registry=REGISTRY,
)
RECONCILE_DRIFT = Gauge(
    "tollgate_bandwidth_drift_micro",
    "Bandwidth charge drift corrected by the last run.",
    registry=REGISTRY,
)
USAGE_DEAD_LETTERS = Counter(
    "tollgate_usage_dead_letters_total",
    "Usage rows moved to the dead-letter table because the database refused them.",
    registry=REGISTRY,
)
