"""Shapes: the request and answer bodies of each API, and the translations between them.

Pure translation, no Django, nothing of the gateway's but gateway.types (an import-linter
contract in pyproject.toml keeps it so). The gateway uses a shape through its protocols
(protocols.py): each API's module (openai, anthropic, responses, embeddings, internal)
offers one object satisfying them. Across shapes, bodies are translated by modules of one
concern each, on the field toolkit of fields.py:

- requests: requests_to_anthropic, requests_to_openai, responses_requests (Responses to chat);
- whole answers: chat_answers, responses_answers;
- streams: chat_streams, responses_streams.
"""
