# syntax=docker/dockerfile:1
# One image for every lagpilot process: `lagpilot run` (pipeline), `lagpilot actuate`
# (actuator), `lagpilot scaler` (KEDA external scaler), `lagpilot status`,
# `lagpilot control halt|resume|tail`.
#
#   docker build -t lagpilot:0.1.0 .
#   docker run --rm -e KAFKA_BOOTSTRAP=redpanda:9092 lagpilot:0.1.0 run
#
# Two stages: the build stage turns the repository into a wheel and installs it with every
# dependency pinned by deploy/docker/requirements.lock into a venv; the runtime stage copies
# only that venv, so compilers, pip caches and the source tree never ship. Wheels only
# (--only-binary): a dependency that would need a compiler fails the build loudly instead of
# silently building something different.

FROM python:3.11.11-slim-bookworm AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
RUN python -m venv /opt/lagpilot && /opt/lagpilot/bin/pip install pip==24.3.1
COPY deploy/docker/requirements.lock /src/requirements.lock
# Dependencies first, in their own layer: a code change does not reinstall them.
RUN /opt/lagpilot/bin/pip install --only-binary=:all: -r /src/requirements.lock
COPY pyproject.toml README.md /src/
COPY pipeline /src/pipeline
COPY actuators /src/actuators
COPY schemas /src/schemas
COPY runtime /src/runtime
RUN /opt/lagpilot/bin/pip wheel --no-deps --wheel-dir /wheels /src \
 && /opt/lagpilot/bin/pip install --no-deps /wheels/lagpilot-*.whl \
 && /opt/lagpilot/bin/pip check

FROM python:3.11.11-slim-bookworm
LABEL org.opencontainers.image.title="lagpilot" \
      org.opencontainers.image.description="Consumer-lag control plane for Redpanda and Kafka" \
      org.opencontainers.image.licenses="Apache-2.0"
# A fixed, unprivileged uid/gid, so Kubernetes' runAsNonRoot can verify it without a name.
RUN groupadd --system --gid 10001 lagpilot \
 && useradd --system --uid 10001 --gid 10001 --home-dir /var/lib/lagpilot --create-home \
      --shell /usr/sbin/nologin lagpilot \
 && install -d -o 10001 -g 10001 /var/lib/lagpilot/state
# (the state dir exists in the image, owned by lagpilot, so a fresh named volume mounted
# there inherits that owner instead of root's)
COPY --from=build /opt/lagpilot /opt/lagpilot
ENV PATH=/opt/lagpilot/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    LAGPILOT_STATE_DIR=/var/lib/lagpilot/state
WORKDIR /var/lib/lagpilot
USER 10001:10001
# 9101: pipeline /metrics /healthz /readyz; 9102: actuator's; 9103: scaler's; 9105: scaler gRPC.
EXPOSE 9101 9102 9103 9105
ENTRYPOINT ["lagpilot"]
CMD ["--help"]
