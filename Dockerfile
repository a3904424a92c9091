# syntax=docker/dockerfile:1
#
# The inferwatch agent image: the agent and its Kubernetes discovery only
# (`run`; also `simulate` and `loadgen`, which need nothing more). The weekly
# report's image adds its extra (matplotlib):
#
#   docker build -t inferwatch:local .
#   docker build --build-arg INFERWATCH_EXTRAS=kubernetes,report -t inferwatch:local-report .
#   docker run --rm -p 10127:10127 inferwatch:local run --gpu-backend none
#
# It carries no GPU library of its own: NVML (libnvidia-ml.so.1) and the
# /dev/nvidia* nodes are injected by the NVIDIA container runtime when the
# container is started with a GPU (`--gpus`, a Compose device reservation, or
# NVIDIA_VISIBLE_DEVICES under the nvidia runtime). See docs/deploy.md.

ARG PYTHON_VERSION=3.12
# pyproject.toml's extras to install with the agent (kubernetes: the kubelet's
# pod-resources client for the DaemonSet; report, generate, demo: the rest)
ARG INFERWATCH_EXTRAS=kubernetes

# ---------------------------------------------------------------------------
# builder: turns the source tree into wheels (the package and every
# dependency), so the final stage installs offline and needs no compiler.
FROM python:${PYTHON_VERSION}-slim AS builder
ARG INFERWATCH_EXTRAS

WORKDIR /src
COPY pyproject.toml README.md LICENSE ./
COPY agent ./agent
RUN pip wheel --no-cache-dir --wheel-dir /wheels ".[${INFERWATCH_EXTRAS}]"

# ---------------------------------------------------------------------------
# final: the slim Python base plus the wheels, run as an unprivileged user.
FROM python:${PYTHON_VERSION}-slim
ARG INFERWATCH_EXTRAS

ARG INFERWATCH_UID=10001
RUN groupadd --system --gid "${INFERWATCH_UID}" inferwatch \
    && useradd --system --uid "${INFERWATCH_UID}" --gid "${INFERWATCH_UID}" \
        --home-dir /nonexistent --no-create-home --shell /usr/sbin/nologin inferwatch \
    && install -d -o "${INFERWATCH_UID}" -g "${INFERWATCH_UID}" -m 0750 /var/lib/inferwatch \
    && install -d -m 0755 /etc/inferwatch

# The wheels are bind-mounted from the builder for this one step, so they
# never become a layer of the final image; only those of the extras asked for
# were built. DL3013 (pin versions): --no-index leaves pip only the wheels built
# above from this tree, one version of each.
# hadolint ignore=DL3013
RUN --mount=type=bind,from=builder,source=/wheels,target=/wheels \
    pip install --no-cache-dir --no-index --find-links=/wheels "inferwatch[${INFERWATCH_EXTRAS}]" \
    && inferwatch --version

# NVML needs only the "utility" driver capability; asking for no more keeps the
# NVIDIA runtime from mounting CUDA/compute libraries into the agent.
# MPLCONFIGDIR: the weekly report (its image) renders charts with matplotlib,
# which needs a writable cache directory; /tmp is writable even with a
# read-only root.
# INFERWATCH_REVISION: the source revision, for inferwatch_build_info
# (docker build --build-arg INFERWATCH_REVISION="$(git rev-parse HEAD)").
ARG INFERWATCH_REVISION=unknown
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    INFERWATCH_REVISION=${INFERWATCH_REVISION} \
    NVIDIA_DRIVER_CAPABILITIES=utility \
    MPLCONFIGDIR=/tmp/matplotlib

USER 10001:10001
WORKDIR /var/lib/inferwatch
EXPOSE 10127

# Liveness of the agent process, by Python (the slim image has no curl). The
# port follows INFERWATCH_LISTEN when it is set. Kubernetes ignores this and
# uses the probes in deploy/kubernetes; Compose disables it for the services
# that run another sub-command (simulate, loadgen).
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; port = os.environ.get('INFERWATCH_LISTEN', ':10127').rsplit(':', 1)[1]; urllib.request.urlopen(f'http://127.0.0.1:{port}/healthz', timeout=4)"]

ENTRYPOINT ["inferwatch"]
CMD ["run"]
