# fusemax-sim: reproduce the FuseMax paper's figures with `docker compose run --rm experiments`
# (or `docker build -t fusemax-sim . && docker run --rm --user "$(id -u):$(id -g)"
#  -v "$PWD/experiments/out:/app/experiments/out" fusemax-sim`).
# The install is the README's (`pip install -c constraints.txt -e .`), in two steps so that a
# source edit does not reinstall the dependencies; .ci/run runs the same steps outside Docker.
# The base image is pinned to its Python and Debian releases; the dependencies to the
# versions the tests pass with (constraints.txt).
FROM python:3.11.7-slim-bookworm

# make: the default command is the README's `make experiments`. Debian's make is not pinned to
# a version: the pinned image's release fixes it, and any make runs this Makefile.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends make \
    && rm -rf /var/lib/apt/lists/*

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    MPLBACKEND=Agg \
    MPLCONFIGDIR=/tmp/matplotlib \
    XDG_CACHE_HOME=/tmp/cache

WORKDIR /app
# the dependencies first (pyproject.toml's, at the locked versions): a layer that source
# edits leave cached
COPY constraints.txt ./
RUN pip install --no-cache-dir -c constraints.txt lark numpy pandas pyyaml matplotlib tqdm
COPY . .
RUN pip install --no-cache-dir -c constraints.txt -e .

# an unprivileged user; docker-compose runs it as the host user (UID/GID), so what lands in
# the mounted folder belongs to whoever ran it
RUN useradd --create-home --uid 1000 fusemax \
    && mkdir -p experiments/out \
    && chown -R fusemax:fusemax /app/experiments
USER 1000:1000

# Figures, result CSVs and report.md land here: mount a host folder to keep them.
VOLUME ["/app/experiments/out"]

CMD ["make", "experiments"]
