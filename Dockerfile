# shadowsim image: `docker build -t shadowsim:0.1.0 .`
# Two stages: build shadowsim's wheel with the build tools, then install the pinned, hash-checked runtime
# dependencies of requirements.lock (`make lock`; no test tools, no embedded broker) and the wheel without
# dependencies into a clean slim image that runs as an unprivileged user. The default command is the live
# shadow; see deploy/compose.
# The build stage has no C compiler, so setup.py's optional compiled modules (Cython) are skipped and the image
# runs the pure-Python sources (same results; docs/architecture.md, "Compiled core").
FROM python:3.11-slim-bookworm AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY simcore ./simcore
COPY streams ./streams
COPY exporters ./exporters
COPY shadowsim ./shadowsim
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .

FROM python:3.11-slim-bookworm
LABEL org.opencontainers.image.title="shadowsim" \
      org.opencontainers.image.description="Event-sourced shadow simulator for SGLang serving clusters" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
# Fixed uid/gid 10001 so Kubernetes' runAsUser and volume ownership (fsGroup) match the image.
RUN groupadd --system --gid 10001 shadowsim \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --shell /usr/sbin/nologin shadowsim \
    && mkdir -p /var/lib/shadowsim \
    && chown 10001:10001 /var/lib/shadowsim
COPY requirements.lock /tmp/requirements.lock
RUN pip install --no-cache-dir --require-hashes --only-binary=:all: -r /tmp/requirements.lock \
    && rm /tmp/requirements.lock
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir --no-deps --no-index /wheels/shadowsim-*.whl \
    && rm -rf /wheels
USER 10001:10001
WORKDIR /var/lib/shadowsim
# /metrics, /healthz (liveness) and /readyz (readiness) of `shadowsim run --metrics-port 9400`.
EXPOSE 9400
# Healthy = /healthz answers 200 (503 when the consumer loop has not polled for 60 s). Python: no curl in slim.
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:9400/healthz', timeout=4)"]
ENTRYPOINT ["shadowsim"]
CMD ["run", "--metrics-host", "0.0.0.0", "--metrics-port", "9400", "--state-dir", "/var/lib/shadowsim/state"]
