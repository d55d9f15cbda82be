"""Shared infrastructure every app may use, and which uses none of them.

The config bus, the database-thread helper, the Redis wrapper and its shared state, metrics,
the one error language, integer money arithmetic and sealing.
"""
