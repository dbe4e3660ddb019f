# fusemax-sim: reproduce the FuseMax paper's figures with `docker compose run --rm experiments`
# (or `docker build -t fusemax-sim . && docker run --rm -v "$PWD/experiments/out:/app/experiments/out" fusemax-sim`).
# The install is the README's (`pip install -e .`); .ci/run runs the same steps outside Docker.
FROM python:3.11-slim

# make: the default command is the README's `make experiments`. Debian's make is not pinned to
# a version: the slim image's release fixes it, and any make runs this Makefile.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends make \
    && rm -rf /var/lib/apt/lists/*

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    MPLBACKEND=Agg \
    MPLCONFIGDIR=/tmp/matplotlib

WORKDIR /app
COPY . .
RUN pip install --no-cache-dir -e .

# Figures, result CSVs and report.md land here: mount a host folder to keep them.
VOLUME ["/app/experiments/out"]

CMD ["make", "experiments"]
