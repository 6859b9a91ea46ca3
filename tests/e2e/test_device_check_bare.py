"""Issue #52 item 1: the device check starts on a bare GPU machine. Emulated here: a fresh venv that holds only
the GPU image's packages (the list in docs/scale-up.md, linked from this venv) plus what `make device-wheels`
carries (the Makefile's DEVICE_PKGS and DEVICE_SDISTS, likewise linked: CI's Python is not the image's 3.12, so
the cp312 wheels themselves cannot be unpacked here), the project NOT installed, and the check's CPU half run
from the checkout -- the trainer's `accelerate launch` child included.
"""

from __future__ import annotations

import importlib.metadata as md
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def image_packages() -> set[str]:
    text = (REPO / "docs" / "scale-up.md").read_text()
    block = re.search(r"```text gpu-image-packages\n(.*?)```", text, re.S)
    assert block, "docs/scale-up.md lost its gpu-image-packages list"
    return {_norm(n) for n in block.group(1).split()}


def carried_packages() -> set[str]:
    make = (REPO / "Makefile").read_text().replace("\\\n", " ")
    names: set[str] = set()
    for var in ("DEVICE_PKGS", "DEVICE_SDISTS"):
        names |= {_norm(n) for n in re.search(rf"^{var} := (.*)$", make, re.M).group(1).split()}
    return names


def with_needs(names: set[str], absent: set[str]) -> set[str]:
    """`names` and, through this venv's metadata, everything they require (the image is self-consistent at its
    own versions; ours may need more, e.g. a newer huggingface_hub's httpx2), never a name in `absent`."""
    from packaging.requirements import Requirement

    todo, seen = list(names), set()
    while todo:
        name = todo.pop()
        if name in seen or name in absent:
            continue
        seen.add(name)
        try:
            reqs = md.requires(name) or []
        except md.PackageNotFoundError:
            continue
        for line in reqs:
            req = Requirement(line)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(_norm(req.name))
    return seen


def link_distributions(names: set[str], into: Path) -> set[str]:
    """This venv's distributions named in `names`, linked into `into` (modules and .dist-info: transformers
    reads its needs' versions through importlib.metadata). Returns the names found."""
    into.mkdir(parents=True)
    found = set()
    for dist in md.distributions():
        name = _norm(dist.metadata["Name"])
        if name not in names or name == "thinking-seeds" or name in found:
            continue
        found.add(name)
        root = Path(dist.locate_file(""))
        tops = {f.parts[0] for f in dist.files or () if f.parts[0] not in ("..", "__pycache__")}
        for top in tops:
            src = root / top
            if not top.endswith(".pth") and src.exists() and not (into / top).exists():
                (into / top).symlink_to(src)
    return found


@pytest.mark.slow
def test_device_check_runs_with_the_project_not_installed(tmp_path):
    image, carried = image_packages(), carried_packages()
    assert {"torch", "transformers", "accelerate", "peft", "pyarrow", "pyyaml", "psutil"} <= image
    assert not {"pydantic", "duckdb", "math-verify", "reasoning-gym", "prefect"} & image  # what the image lacks
    assert {"pydantic", "math-verify", "reasoning-gym"} <= carried

    venv = tmp_path / "bare"
    base = Path(sys.base_prefix) / "bin" / "python3"
    subprocess.run([str(base), "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    py = venv / "bin" / "python"
    site = Path(
        subprocess.run(
            [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    absent = {"pydantic", "duckdb", "math-verify", "reasoning-gym", "prefect", "thinking-seeds"}
    linked = link_distributions(with_needs(image, absent), tmp_path / "image-site")
    (site / "image.pth").write_text(str(tmp_path / "image-site") + "\n")
    # What scripts/device_check.sh would have installed from .device-wheels into its --target folder.
    link_distributions(carried - linked, tmp_path / "ts-site")

    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    probe = "import importlib.util as u; print(u.find_spec('thinking_seeds'), u.find_spec('pydantic'))"
    out = subprocess.run([str(py), "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["None", "None"], out.stdout  # bare: no project, no pydantic

    env.update(
        OUT=str(tmp_path / "out"),
        PYTHON=str(py),
        DEVICE_SITE=str(tmp_path / "ts-site"),
        DEVICE_WHEELS=str(tmp_path / "no-wheels"),
        TMPDIR=str(tmp_path),
    )
    r = subprocess.run(
        ["bash", "scripts/device_check.sh", "--cpu-only", "--iterations", "2"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    res = json.loads((tmp_path / "out" / "device_check.json").read_text())
    assert res["package_from"].startswith("the checkout"), res["package_from"]
    cpu = [c for c in res["cases"] if c["device"] == "cpu"]
    assert {c["algorithm"] for c in cpu} == {"grpo", "thinking_seeds"}
    for c in cpu:  # the persistent trainer (update.launcher=accelerate) ran in a child of the bare venv
        assert c["status"] == "ok", c
        assert c["launcher"] == "accelerate" and c["update_s_per_step"] > 0
