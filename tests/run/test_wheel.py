"""diageval installs like a tool: a wheel built from this tree works outside the checkout.

The wheel is built from a copy of the tree (no build/ or egg-info left in the checkout), installed into a
fresh virtual environment that borrows torch and the other dependencies from the site-packages of the
interpreter running the tests (nothing is downloaded), and driven from an empty temporary directory, the
way a diagnoser's author would run it in their own CI.

Borrowed through a ``.pth`` file naming this interpreter's site folders, not ``--system-site-packages``:
that flag borrows the *base* interpreter's site, which is where the dependencies are only when the tests
run on a system interpreter; inside a virtual environment they are in the venv's own site (issue 20).
Plain folder lines of a ``.pth`` file do not run the ``.pth`` files inside those folders, so the editable
install of the checkout found there stays inert and the wheel's own ``diageval`` is the one imported.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import site as python_site
import subprocess
import sys
from pathlib import Path

import pytest
from locations import REPO

SOURCES = ["pyproject.toml", "README.md", "LICENSE", "harness", "diagnosers", "scoring", "reports", "cases"]

pytestmark = pytest.mark.slow


def _run(argv: list[str], cwd: Path, env: dict[str, str], timeout: float = 600) -> subprocess.CompletedProcess:
    out = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, f"{' '.join(argv)} exited {out.returncode}\nstdout:\n{out.stdout}\nstderr:\n{out.stderr}"
    return out


def _setuptools_builds_wheels() -> bool:
    try:
        import setuptools
    except ImportError:
        return False
    major, minor = (int(x) for x in setuptools.__version__.split(".")[:2])
    return (major, minor) >= (70, 1) or importlib.util.find_spec("wheel") is not None


def _package_files(site: Path) -> dict[str, float]:
    return {str(p.relative_to(site)): p.stat().st_mtime for p in (site / "diageval").rglob("*")
            if p.is_file() and "__pycache__" not in p.parts}


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(venv bin folder, its site-packages) with the freshly built wheel installed."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    src.mkdir()
    for name in SOURCES:
        path = REPO / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        else:
            shutil.copy2(path, src / name)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DIAGEVAL_", "PIP_REQUIRE_VIRTUALENV"))}
    dist = tmp / "dist"
    # Offline with this interpreter's setuptools when it can build wheels itself (>= 70.1), else in pip's
    # isolated build environment (fetches setuptools from the package index).
    isolation = [] if _setuptools_builds_wheels() else ["--use-pep517"]
    offline = ["--no-build-isolation"] if not isolation else []
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", *offline, *isolation, "-q", "-w", str(dist), str(src)], tmp, env)
    wheel = next(dist.glob("diageval-*.whl"))
    venv = tmp / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], tmp, env)
    py = venv / "bin" / "python"
    venv_site = Path(_run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], tmp, env).stdout.strip())
    borrowed = [*python_site.getsitepackages(), python_site.getusersitepackages()]
    (venv_site / "zz_borrowed_site.pth").write_text("".join(f"{p}\n" for p in borrowed if Path(p).is_dir()))
    # venv seeds its own (old) setuptools, which would shadow this site's and fail torch's requirement on it
    subprocess.run([str(py), "-m", "pip", "uninstall", "-q", "-y", "setuptools"], cwd=tmp, env=env, capture_output=True)
    _run([str(py), "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--force-reinstall", str(wheel)], tmp, env)
    site = Path(_run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], tmp, env).stdout.strip())
    return venv / "bin", site, env


def test_the_installed_package_is_the_wheel_not_the_checkout(installed, tmp_path):
    bin_dir, site, env = installed
    out = _run([str(bin_dir / "python"), "-c", "import diageval; print(diageval.__file__)"], tmp_path, env)
    assert Path(out.stdout.strip()).is_relative_to(site), out.stdout
    assert (site / "diageval" / "corpus" / "taxonomy.yaml").is_file()
    assert len(list((site / "diageval" / "corpus").rglob("*.yaml"))) == len(list((REPO / "cases").rglob("*.yaml")))


def test_the_wheel_runs_its_corpus_from_any_directory(installed, tmp_path):
    bin_dir, site, env = installed
    before = _package_files(site)
    diageval = str(bin_dir / "diageval")

    version = _run([str(bin_dir / "python"), "-m", "diageval", "--version"], tmp_path, env).stdout
    assert version.startswith("diageval ") and "case set " in version and "taxonomy " in version, version
    listed = _run([diageval, "cases", "list"], tmp_path, env).stdout
    assert "mlp-ddp-healthy" in listed
    assert "causes:" in _run([diageval, "taxonomy"], tmp_path, env).stdout
    assert '"additionalProperties": false' in _run([diageval, "schema", "case"], tmp_path, env).stdout

    # a gross positive case: a healthy control's check against its twins can judge a recording made under the test
    # phase's load invalid (mlp-ddp-healthy did in ci14: "0 scored"), which is not what this test tests
    run = _run([diageval, "run", "--diagnoser", "null", "--case", "straggler-rank1"], tmp_path, env)
    assert "1 scored" in run.stdout + run.stderr, run.stdout + run.stderr
    runs = list((tmp_path / "runs").glob("null-*/summary.json"))
    assert len(runs) == 1  # working state where the user runs it ...
    assert (tmp_path / ".diageval" / "bundles").is_dir()
    assert _package_files(site) == before  # ... and nothing written inside site-packages
