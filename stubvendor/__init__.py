"""The stub vendor: a server speaking OpenAI's and Anthropic's shapes, for tests and benchmarks.

Its own package, not part of the gateway it fakes: it imports nothing of Tollgate's.
"""
