"""Start the test provider: migrate its SQLite file, create the users and clients of
config.json, serve on OP_PORT (python tests/support/oidc_provider/serve.py)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "oidc_provider.settings")

import django  # noqa: E402

django.setup()

from django.conf import settings  # noqa: E402
from django.contrib.auth.models import User  # noqa: E402
from django.core.management import call_command  # noqa: E402
from oauth2_provider.models import Application  # noqa: E402


def main() -> None:
    call_command("migrate", verbosity=0)
    op_dir = settings.OP_DIR  # type: ignore[misc]  # the provider's settings.py, not config's
    config = json.loads((op_dir / "config.json").read_text())
    for name, user in config["users"].items():
        User.objects.create_user(username=name, password=user["password"])
    for client in config["clients"]:
        Application.objects.create(
            name=client["client_id"],
            client_id=client["client_id"],
            client_secret=client["client_secret"],
            client_type=Application.CLIENT_CONFIDENTIAL,
            authorization_grant_type=Application.GRANT_AUTHORIZATION_CODE,
            redirect_uris=" ".join(client["redirect_uris"]),
            algorithm=Application.RS256_ALGORITHM,
            skip_authorization=True,
        )
    port = settings.PORT  # type: ignore[misc]  # the provider's settings.py, not config's
    call_command("runserver", f"127.0.0.1:{port}", use_reloader=False, verbosity=0)


if __name__ == "__main__":
    main()
