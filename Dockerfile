# Slipway's image: one image for web (gunicorn, the default command), worker and beat.
#
# Stage 1 fetches htmx and uPlot from the npm registry exactly as scripts/vendor_htmx.sh and
# scripts/vendor_uplot.sh do (the portal serves them from its own static files, never a CDN);
# stage 2 installs the project's dependencies, collects static files at build time and runs as an unprivileged user.

FROM node:22-slim AS htmx
ARG HTMX_VERSION=2.0.8
ARG UPLOT_VERSION=1.6.32
WORKDIR /build
RUN npm pack --silent "htmx.org@${HTMX_VERSION}" \
    && tar -xzf "htmx.org-${HTMX_VERSION}.tgz" \
    && cp package/dist/htmx.min.js /build/htmx.min.js \
    && rm -rf package \
    && npm pack --silent "uplot@${UPLOT_VERSION}" \
    && tar -xzf "uplot-${UPLOT_VERSION}.tgz" \
    && cp package/dist/uPlot.iife.min.js /build/uplot.min.js \
    && cp package/dist/uPlot.min.css /build/uplot.min.css

FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    DJANGO_SETTINGS_MODULE=portal.settings \
    PYTHONPATH=/app \
    SLIPWAY_VAR_DIR=/app/var

# A fixed numeric uid, so Kubernetes' runAsNonRoot can verify it without a passwd lookup.
RUN groupadd --system --gid 10001 slipway \
    && useradd --system --uid 10001 --gid slipway --home-dir /app --no-create-home --shell /usr/sbin/nologin slipway

WORKDIR /app
# Dependencies first: this layer is rebuilt only when pyproject.toml or the `slipway` command
# changes. The command line (slipway/) is the one package installed; the portal runs from /app.
COPY pyproject.toml README.md ./
COPY slipway/ slipway/
RUN pip install .
COPY . .
COPY --from=htmx /build/htmx.min.js static/vendor/htmx.min.js
COPY --from=htmx /build/uplot.min.js /build/uplot.min.css static/vendor/

# Hashed, compressed static files for whitenoise. The throw-away key and var dir only let
# the settings load; nothing here touches a database.
RUN DEBUG=false SECRET_KEY=collectstatic-only-not-a-secret SLIPWAY_VAR_DIR=/tmp/build-var \
        python manage.py collectstatic --noinput \
    && rm -rf /tmp/build-var \
    && mkdir -p /app/var \
    && chown slipway:slipway /app/var

USER 10001:10001
EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=3)"]
CMD ["gunicorn", "portal.wsgi", "--config", "gunicorn.conf.py", "--bind", "0.0.0.0:8000", "--workers", "3", "--threads", "4", "--access-logfile", "-"]
