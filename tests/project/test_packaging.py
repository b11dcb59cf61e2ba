"""The distribution says what the package needs and is: metadata, bounds, license, contents.

Under pytest, the checks read the repository: pyproject.toml against the constraints files, the
license, the changelog and the docs site's links. Run as a script, the same file checks built
or installed distributions, with nothing but the standard library and statickernel itself
(`make package-check` runs it both ways):

    python tests/project/test_packaging.py dist DIR    # the sdist and the wheel in DIR
    python tests/project/test_packaging.py installed   # the installed statickernel, from a fresh venv
"""

import importlib.metadata
import pathlib
import re
import subprocess
import sys
import tarfile
import tomllib
import zipfile

ROOT = pathlib.Path(__file__).resolve().parents[2]
HOMEPAGE = "https://github.com/statickernel/statickernel"
DOCS_URL = "https://statickernel.github.io/statickernel/"
URLS = {
    "Homepage": HOMEPAGE,
    "Documentation": DOCS_URL,
    "Repository": HOMEPAGE,
    "Issues": f"{HOMEPAGE}/issues",
    "Changelog": f"{HOMEPAGE}/blob/main/CHANGELOG.md",
}
# The runtime requirements as they must appear in the metadata ((name, environment marker):
# specifier set). jax 0.11 needs Python 3.12: Python 3.11 takes jax 0.10.2, whose Pallas Mosaic
# GPU imports absl without declaring it.
PY312, PY311 = "python_version >= '3.12'", "python_version < '3.12'"
BOUNDS = {
    ("jax", PY312): "<0.13,>=0.11.2",
    ("jaxlib", PY312): "<0.13,>=0.11.2",
    ("jax", PY311): "<0.11,>=0.10.2",
    ("jaxlib", PY311): "<0.11,>=0.10.2",
    ("absl-py", PY311): ">=2.0",
    ("jaxtyping", ""): "<0.4,>=0.3.11",
    ("beartype", ""): ">=0.22",
    ("typing-extensions", ""): ">=4.12",
    ("numpy", ""): ">=2.1",
}
# Each constraints file: the Python its venv has, and the extras it pins.
CONSTRAINTS = {
    "jax-0.10.2.txt": ("3.11", ("test",)),
    "jax-0.11.2.txt": ("3.12", ("test", "docs", "dev", "release")),
    "jax-0.12.0.1.txt": ("3.12", ("test", "docs", "dev", "release")),
}
EXTRAS = {"cuda12", "cuda13", "aot", "test", "docs", "dev", "release"}
# The package and one module of each sub-package: the distributions ship the stages' folders.
PACKAGE_FILES = {
    "statickernel/__init__.py",
    "statickernel/py.typed",
    "statickernel/cli/__init__.py",
    "statickernel/language/tile.py",
    "statickernel/_compiler/build.py",
    "statickernel/_compiler/mosaic_gpu/lower/rules.py",
    "statickernel/runtime/kernel.py",
    "statickernel/aot/compile.py",
    "statickernel/testing/probes.py",
}


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _split(requirement: str) -> tuple[str, str]:
    """`name[extra]>=1,<2; marker` as (name, the specifiers in sorted order)."""
    found = re.match(r"\s*([A-Za-z0-9_.-]+)(\[[^\]]*\])?\s*([^;]*)", requirement)
    assert found, requirement
    specs = ",".join(sorted(s.strip() for s in found[3].split(",") if s.strip()))
    return found[1].lower().replace("_", "-"), specs


def _bounds(requirements: list[str]) -> dict[tuple[str, str], str]:
    """Requirements as `BOUNDS` holds them: (name, environment marker, quoted as pyproject.toml
    quotes it whichever quotes the metadata uses): specifier set."""
    return {
        (_split(r)[0], r.partition(";")[2].strip().replace('"', "'")): _split(r)[1]
        for r in requirements
    }


# ------------------------------------------------------------------ the repository (pytest)


def test_the_project_metadata_is_complete() -> None:
    project = _pyproject()["project"]
    assert project["readme"] == {"file": "README.md", "content-type": "text/markdown"}
    assert project["license"] == "Apache-2.0"
    assert project["license-files"] == ["LICENSE"]
    assert project["authors"] == [{"name": "The statickernel Authors"}]
    assert project["urls"] == URLS
    assert {"jax", "pallas", "mosaic-gpu", "cuda", "hopper", "jaxtyping"} <= set(
        project["keywords"]
    )
    classifiers = project["classifiers"]
    assert not [c for c in classifiers if c.startswith("License ::")], (
        "PEP 639: no license classifier next to an SPDX license expression"
    )
    for expected in (
        "Development Status :: 3 - Alpha",
        "Environment :: GPU :: NVIDIA CUDA :: 12",
        "Environment :: GPU :: NVIDIA CUDA :: 13",
        "Operating System :: POSIX :: Linux",
        "Programming Language :: Python :: 3.11",
        "Programming Language :: Python :: 3.12",
        "Typing :: Typed",
    ):
        assert expected in classifiers
    assert sorted(classifiers) == classifiers


def test_the_runtime_requirements_are_bounded() -> None:
    project = _pyproject()["project"]
    assert _bounds(project["dependencies"]) == BOUNDS
    extras = project["optional-dependencies"]
    assert set(extras) == EXTRAS
    # The CUDA extras are jax's own, within the bounds of the jax that runs kernels.
    assert [_split(r) for r in extras["cuda12"]] == [("jax", BOUNDS["jax", PY312])]
    assert [_split(r) for r in extras["cuda13"]] == [("jax", BOUNDS["jax", PY312])]
    assert extras["cuda12"] == ["jax[cuda12]>=0.11.2,<0.13"]
    assert extras["cuda13"] == ["jax[cuda13]>=0.11.2,<0.13"]


def _pins(path: pathlib.Path) -> dict[str, str]:
    pins = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, version = line.split("==")
            pins[name.lower().replace("_", "-")] = version.strip()
    return pins


def _satisfies(version: str, specs: str) -> bool:
    def key(v: str) -> tuple[int, ...]:
        return tuple(int(p) for p in v.split("."))

    for spec in filter(None, specs.split(",")):
        op, bound = re.match(r"(>=|<=|<|>|==)(.+)", spec).groups()  # type: ignore[union-attr]
        a, b = key(version), key(bound)
        if not {">=": a >= b, "<=": a <= b, "<": a < b, ">": a > b, "==": a == b}[op]:
            return False
    return True


def test_the_constraints_files_pin_versions_within_the_bounds() -> None:
    files = sorted((ROOT / "constraints").glob("jax-*.txt"))
    assert sorted(f.name for f in files) == sorted(CONSTRAINTS)
    extras = _pyproject()["project"]["optional-dependencies"]
    for path in files:
        pins = _pins(path)
        jax_version = path.stem.removeprefix("jax-")
        assert pins["jax"] == pins["jaxlib"] == jax_version, path.name
        python, pinned_extras = CONSTRAINTS[path.name]
        marker = PY311 if python == "3.11" else PY312
        for (name, applies), specs in BOUNDS.items():
            if applies in ("", marker):
                assert _satisfies(pins[name], specs), f"{path.name}: {name}=={pins[name]}"
        # Everything the extras its venv installs name is pinned, so CI installs are repeatable.
        for extra in pinned_extras:
            for requirement in extras[extra]:
                name, specs = _split(requirement)
                if name == "statickernel":
                    continue
                assert name in pins, f"{path.name} does not pin {name} ({extra} extra)"
                assert _satisfies(pins[name], specs), f"{path.name}: {name}=={pins[name]}"
    aot = _pins(ROOT / "constraints" / "aot-jax-0.11.2.txt")
    assert aot["jax-cuda13-plugin"] == aot["jax-cuda13-pjrt"] == "0.11.2"


def test_the_version_has_one_source() -> None:
    import statickernel

    setuptools = _pyproject()["tool"]["setuptools"]
    assert "version" not in _pyproject()["project"]
    assert _pyproject()["project"]["dynamic"] == ["version"]
    assert setuptools["dynamic"]["version"] == {"attr": "statickernel.__version__"}
    source = (ROOT / "src" / "statickernel" / "__init__.py").read_text()
    assert re.findall(r'^__version__ = "([^"]+)"$', source, re.M) == [statickernel.__version__]
    # The command line reports the package's version, not a copy of it.
    cli = (ROOT / "src" / "statickernel" / "cli" / "parser.py").read_text()
    assert "from .. import __version__" in cli
    assert f"## [{statickernel.__version__}]" in (ROOT / "CHANGELOG.md").read_text()


def test_the_license_is_the_apache_license() -> None:
    text = (ROOT / "LICENSE").read_text()
    assert text.startswith("Copyright 2026 The statickernel Authors\n")
    assert "Apache License\n                           Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text
    assert len(text.splitlines()) > 200  # the full text, not a notice


def test_the_docs_site_links_the_same_repository() -> None:
    mkdocs = (ROOT / "mkdocs.yml").read_text()
    assert f"site_url: {DOCS_URL}\n" in mkdocs
    assert f"repo_url: {HOMEPAGE}\n" in mkdocs
    assert "repo_name: statickernel/statickernel\n" in mkdocs
    assert "edit_uri: edit/main/docs/\n" in mkdocs
    assert "- content.action.edit\n" in mkdocs


def test_the_readme_links_work_on_pypi() -> None:
    # The README is the long description on PyPI, where a relative link leads nowhere.
    readme = (ROOT / "README.md").read_text()
    targets = re.findall(r"\]\(([^)]+)\)", readme)
    assert targets
    relative = [t for t in targets if not t.startswith(("https://", "#"))]
    assert not relative, f"README links must be absolute: {relative}"


def test_package_check_runs_in_ci() -> None:
    assert '"${MAKE[@]}" package-check' in (ROOT / ".ci" / "run").read_text()
    makefile = (ROOT / "Makefile").read_text()
    assert "tests/project/test_packaging.py dist" in makefile
    assert "tests/project/test_packaging.py installed" in makefile


# ------------------------------------------------------- built distributions (as a script)


def check_dist(folder: pathlib.Path) -> None:
    """The sdist and the wheel hold the package, its data and license, and nothing else."""
    (sdist,) = folder.glob("statickernel-*.tar.gz")
    (wheel,) = folder.glob("statickernel-*.whl")
    version = wheel.name.split("-")[1]
    assert sdist.name == f"statickernel-{version}.tar.gz", (sdist.name, wheel.name)

    with tarfile.open(sdist) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    for expected in ("pyproject.toml", "README.md", "LICENSE", "CHANGELOG.md", "PKG-INFO"):
        assert expected in names, f"the sdist lacks {expected}"
    assert {f"src/{p}" for p in PACKAGE_FILES} <= names
    assert any(n.startswith("src/statickernel/targets/") and n.endswith(".txtpb") for n in names)
    stray = sorted(
        n for n in names if n.split("/")[0] in {"tests", "examples", "docs", "bench", ".ci"}
    )
    assert not stray, f"the sdist ships no tests, gallery, docs or benchmarks: {stray[:5]}"

    with zipfile.ZipFile(wheel) as whl:
        files = set(whl.namelist())
        info = f"statickernel-{version}.dist-info"
        metadata = whl.read(f"{info}/METADATA").decode()
    assert files >= PACKAGE_FILES
    assert f"{info}/licenses/LICENSE" in files
    assert all(n.startswith(("statickernel/", info)) for n in files), sorted(files)[:5]
    assert "License-Expression: Apache-2.0" in metadata
    assert "Description-Content-Type: text/markdown" in metadata
    print(f"dist ok: {sdist.name} ({len(names)} entries), {wheel.name} ({len(files)} files)")


# ------------------------------------------------ an installed distribution (as a script)


def check_installed() -> None:
    """The installed statickernel, from outside the repository: metadata, command, a kernel."""
    import statickernel as sk

    location = pathlib.Path(sk.__file__).resolve()
    assert not location.is_relative_to(ROOT), (
        f"statickernel imported from the repository: {location}"
    )
    assert not pathlib.Path.cwd().resolve().is_relative_to(ROOT), "run from outside the repository"
    site = importlib.metadata.distribution("statickernel").locate_file("")
    assert location.parent.parent == pathlib.Path(str(site)).resolve(), (location, site)

    meta = importlib.metadata.metadata("statickernel")
    assert meta["Version"] == sk.__version__ == importlib.metadata.version("statickernel")
    assert meta["License-Expression"] == "Apache-2.0"
    assert meta.get_all("License-File") == ["LICENSE"]
    urls = dict(u.split(", ", 1) for u in meta.get_all("Project-URL") or [])
    assert urls == URLS, urls
    requires = importlib.metadata.requires("statickernel") or []
    runtime = _bounds([r for r in requires if "extra ==" not in r])
    assert runtime == BOUNDS, runtime
    assert set(meta.get_all("Provides-Extra") or []) == EXTRAS
    files = {str(f) for f in importlib.metadata.files("statickernel") or []}
    assert "statickernel/py.typed" in files
    assert any(f.startswith("statickernel/targets/") for f in files)

    command = pathlib.Path(sys.executable).parent / "statickernel"
    shown = subprocess.run([command, "--version"], capture_output=True, text=True, check=True)
    assert shown.stdout.startswith(f"statickernel {sk.__version__} (jax "), shown.stdout

    # A kernel defined here, run on the interpreter at a ragged shape, against numpy.
    program = """
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

import statickernel as sk


@sk.kernel(tile={"M": "BM"}, reference=lambda x: 2 * x + 1)
def affine(x: Float[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float[Array, "M N"]:
    return 2 * sk.load(x) + 1


x = jnp.arange(100 * 30, dtype=jnp.float32).reshape(100, 30)
np.testing.assert_array_equal(np.asarray(affine(x)), 2 * np.asarray(x) + 1)
print(sk.default_backend(), affine.plan(x).grid)
"""
    ran = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert ran.stdout.split() == ["interpret", "(2,)"], ran.stdout
    print(f"installed ok: statickernel {sk.__version__} at {location.parent}")


if __name__ == "__main__":
    match sys.argv[1:]:
        case ["dist", folder]:
            check_dist(pathlib.Path(folder))
        case ["installed"]:
            check_installed()
        case _:
            sys.exit(__doc__)
