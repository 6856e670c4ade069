# syntax=docker/dockerfile:1
# rag-monitor agent image: multi-stage, slim, non-root, CPU-only torch by default.
#
#   docker build -t rag-monitor .
#   docker run -p 4318:4318 -p 8080:8080 rag-monitor
#
# Extras: the default image carries the HHEM scorer and the embedding model (CPU torch, about
# 2 GB more); `--build-arg EXTRAS=agent,postgres` builds the slim image (no torch: the lexical
# scorer, and drift on vectors the apps send). GPU builds: --build-arg
# TORCH_INDEX_URL=https://download.pytorch.org/whl/cu128 (and a CUDA base image).
# `make image` builds it here without a registry (image/build.py); tests/deploy/test_image.py
# builds the slim image, starts it and talks to it.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# ---- build: a virtual environment with the agent and its extras ----------------------------
FROM ${PYTHON_IMAGE} AS build
ARG TORCH_VERSION=2.13.0
# The CPU wheel index: PyPI's default torch wheels pull several GB of CUDA libraries.
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
ARG EXTRAS=agent,embeddings,hhem,postgres
# torch first and from its own index, so the extras below find it satisfied; only the extras
# that run a model need it.
RUN case ",${EXTRAS}," in \
      *,hhem,*|*,embeddings,*) \
        pip install --no-cache-dir --index-url "${TORCH_INDEX_URL}" "torch==${TORCH_VERSION}" ;; \
    esac
WORKDIR /src
COPY pyproject.toml ./
# The dependencies first, from pyproject.toml alone (an empty package and README stand in),
# so a code or README change rebuilds only the small layers below. Their tests/ folders
# (about 150 MB) are not needed to run. The project is not a registry package: DL3013 (pin
# versions) does not apply; its dependencies carry their bounds in pyproject.toml.
# hadolint ignore=DL3013
RUN mkdir rag_monitor && touch rag_monitor/__init__.py README.md \
    && pip install --no-cache-dir ".[${EXTRAS}]" \
    && pip uninstall -y -q rag-monitor \
    && find /opt/venv/lib -path "*/site-packages/*" -type d -name tests -prune -exec rm -rf {} + \
    && rm -r rag_monitor README.md
# A C compiler for the compiled OTLP decoder (setup.py: Cython at build time); the runtime stage
# copies only the venv. Without it pip builds the agent with the upb decoder, at several times the CPU.
# hadolint ignore=DL3008
RUN apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev && rm -rf /var/lib/apt/lists/*
COPY README.md LICENSE setup.py ./
COPY rag_monitor ./rag_monitor
# pip itself is not needed at run time.
# hadolint ignore=DL3013
RUN pip install --no-cache-dir --no-deps . && pip uninstall -y -q pip

# ---- runtime: the venv (with the default config inside the package), nothing to compile with --
FROM ${PYTHON_IMAGE} AS runtime
LABEL org.opencontainers.image.title="rag-monitor" \
      org.opencontainers.image.description="Monitoring agent for retrieval-augmented generation apps" \
      org.opencontainers.image.licenses="Apache-2.0"
RUN groupadd --system --gid 10001 ragmon \
    && useradd --system --uid 10001 --gid ragmon --no-create-home --home-dir /nonexistent \
       --shell /usr/sbin/nologin ragmon \
    && mkdir -p /var/lib/rag-monitor \
    && chown ragmon:ragmon /var/lib/rag-monitor
COPY --from=build /opt/venv /opt/venv
# The config files' defaults ship inside the package (rag_monitor/defaults; settings `default`).
# To change one, mount an edited copy and point its setting at it; Helm mounts its ConfigMaps
# under /etc/rag-monitor/collectors and /etc/rag-monitor/detectors and sets the paths.
# Hosts must be 0.0.0.0 in a container. Caches (Hugging Face, matplotlib) go to /tmp so the
# root filesystem can stay read-only; no model hub at run time (weights come from the
# installed packages or a mounted hhem_model_path).
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HOME=/tmp \
    HF_HUB_OFFLINE=1 \
    RAG_MONITOR_OTLP_HOST=0.0.0.0 \
    RAG_MONITOR_HTTP_HOST=0.0.0.0 \
    RAG_MONITOR_DATA_DIR=/var/lib/rag-monitor
WORKDIR /etc/rag-monitor
USER 10001:10001
EXPOSE 4318 8080
VOLUME ["/var/lib/rag-monitor"]
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080/healthz', timeout=4)"]
ENTRYPOINT ["rag-monitor"]
CMD ["agent"]
