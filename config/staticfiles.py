"""Static files (the Django admin's, the browsable API's, the dashboard's) served by WhiteNoise.

Files are found through Django's finders when the process starts (WHITENOISE_USE_FINDERS), so
neither `make run` nor a deployment has a collectstatic step to forget; a STATIC_ROOT that
`collectstatic` filled is served too.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from typing import BinaryIO

from whitenoise.middleware import (  # type: ignore[import-untyped]  # WhiteNoise ships no types
    WhiteNoiseFileResponse,
    WhiteNoiseMiddleware,
)

CHUNK_BYTES = 65_536


async def _chunks(file: BinaryIO | None) -> AsyncIterator[bytes]:
    if file is None:  # HEAD, 304: headers only
        return
    try:
        while chunk := await asyncio.to_thread(file.read, CHUNK_BYTES):
            yield chunk
    finally:
        file.close()


class StaticFilesMiddleware(WhiteNoiseMiddleware):
    """WhiteNoise's middleware, streaming each file through an async iterator.

    Under ASGI Django reads a sync iterator whole in a thread and warns about it; an async one
    it streams as is.
    """

    def add_files(self, root: str, prefix: str | None = None) -> None:
        # With the finders an uncollected STATIC_ROOT is normal, not worth WhiteNoise's warning.
        if os.path.isdir(root):
            super().add_files(root, prefix)

    @staticmethod
    def serve(static_file, request) -> WhiteNoiseFileResponse:
        answer = static_file.get_response(request.method, request.META)
        response = WhiteNoiseFileResponse(_chunks(answer.file), status=int(answer.status))
        del response["content-type"]  # WhiteNoise's headers name it
        for key, value in answer.headers:
            response[key] = value
        return response
