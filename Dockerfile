# Tollgate's image: one image for every process (gateway, control plane, Celery worker and
# beat, migrate); compose.yaml says which runs where. The default command is the gateway.
#
#   docker build -t tollgate .
#   docker build --secret id=pip_ca,src=/path/to/ca.pem -t tollgate .   # index behind a TLS proxy
#
# BASE_IMAGE is any Debian-like image with python3 (3.11) and its venv module. compose.yaml
# builds it once (`docker compose build`, `podman-compose build`) with BASE_IMAGE and the
# pip_ca secret from BUILD_PIP_CA (docs/production.md); its BASE_IMAGE default repeats this one.
ARG BASE_IMAGE=python:3.11-slim-bookworm

FROM ${BASE_IMAGE} AS builder
WORKDIR /build
COPY requirements.lock .
# The app's venv, built here from the lock: wheels for all of it, installed without pip or
# setuptools in the venv (about 25 MB). The final stage copies the venv alone, so neither the
# wheels nor the pip that installed them become its layers, and a changed lock (a new layer
# above) builds it again. A CA bundle for an index behind a TLS-inspecting proxy comes in as
# a build secret: read by this step, stored in no layer. A current pip first, as the
# Makefile does: one before 23.3 warns that lxml has no `html_clean` extra.
RUN --mount=type=secret,id=pip_ca \
    python3 -m venv /opt/build-venv \
    && if [ -s /run/secrets/pip_ca ]; then export PIP_CERT=/run/secrets/pip_ca; fi \
    && /opt/build-venv/bin/pip install -q --disable-pip-version-check 'pip>=23.3' \
    && /opt/build-venv/bin/pip wheel --no-cache-dir --disable-pip-version-check \
        -r requirements.lock -w /wheels \
    && python3 -m venv --without-pip /opt/venv \
    && /opt/build-venv/bin/pip --python /opt/venv/bin/python install --no-cache-dir \
        --disable-pip-version-check --no-index --find-links /wheels -r requirements.lock

FROM ${BASE_IMAGE}
ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH \
    DJANGO_SETTINGS_MODULE=config.settings \
    TOLLGATE_VAR_DIR=/var/lib/tollgate
# A fixed uid, so a volume's owner means the same thing in every container of the stack.
RUN groupadd --system --gid 10001 tollgate \
    && useradd --system --uid 10001 --gid tollgate --home-dir /var/lib/tollgate \
        --no-create-home --shell /usr/sbin/nologin tollgate \
    && install -d -o tollgate -g tollgate -m 0750 /var/lib/tollgate /var/lib/tollgate/archives
COPY --from=builder /opt/venv /opt/venv
WORKDIR /app
# The code is root's and read-only to the app user; state goes to TOLLGATE_VAR_DIR.
COPY . /app
RUN python -m compileall -q /app
USER tollgate
# No VOLUME here: each container (migrate, worker, every `compose run`) would get an
# anonymous volume that `down` leaves behind. compose.yaml mounts one where state must last.
EXPOSE 8000 8001
# The gateway, as compose.yaml and the Procfile run it (GATEWAY_WORKERS from the environment).
CMD ["sh", "-c", "exec gunicorn config.asgi:gateway_application -k uvicorn_worker.UvicornWorker --workers \"${GATEWAY_WORKERS:-2}\" --bind 0.0.0.0:8000 --graceful-timeout 30"]
