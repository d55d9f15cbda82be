"""Guardrails: a pure scanning core, and the Django app that stores the policies.

The core (checks, credentials, custom, detectors, matches, phones, streaming) finds sensitive
values in a prompt or an answer, redacts them and scans an answer's stream with a bounded
hold-back. No Django in it (pyproject.toml's import-linter contract says so): everything is a
function of its arguments, so the gateway can call it on its hot path and the tests need no
database. Matched text is never stored or logged: a `Match` carries only kind, label and span.

The app part (models, rules, services, selectors, api/, admin) stores the operator's and
accounts' guardrails and where they are attached, and resolves one key's for the gateway
(`selectors.guardrails_for`).
"""
