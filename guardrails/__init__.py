"""Guardrails' pure core: detectors that find sensitive values in a prompt or an answer, the
redaction of what they find, and the scanning of an answer's stream with a bounded hold-back.

No Django here (the app part that stores policies and verdicts sits on top): everything is a
function of its arguments, so the gateway can call it on its hot path and the tests need no
database. Matched text is never stored or logged: a `Match` carries only kind, label and span.
"""
