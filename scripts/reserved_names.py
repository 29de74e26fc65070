"""Write includes/reserved_names.txt: every package_name copier.yml refuses, and why.

    python scripts/reserved_names.py          # add what is missing (after changing a dependency)
    python scripts/reserved_names.py --check  # exit 1, naming them, when a name is missing
    python scripts/reserved_names.py --check --pyproject PROJECT/pyproject.toml  # a render's

A package in src/<name> and a module of the same name elsewhere on sys.path hide one
another: `package_name=optuna` rendered src/optuna, and `import optuna.samplers` failed.
So each line of the file is a name and what it clashes with:

- `keyword`: a Python keyword;
- `stdlib`: a module of the standard library, on any Python the template offers (this
  interpreter's `sys.stdlib_module_names`, typeshed's list of every version's modules, and
  the `test` package);
- `project:PATH`: a top-level folder of the project (and, from releases that copied the
  library into the project, a module its tests imported by name);
- otherwise the distribution whose import name it is: every top-level import name of every
  distribution the generated project installs, that is pip and the dependencies, extras
  and dependency groups of its pyproject.toml (every logger chosen), then theirs, as they
  are installed in this environment (the template's `test` group installs them all). A
  requirement installed nowhere here (its marker names another OS or Python) stands for
  its import names with its normalized name.

Names are only added, never dropped: a name taken on another Python, another platform, or by
another release of a dependency stays refused; delete a line by hand to free its name.
tests/test_questions.py runs `--check` on a rendered project, so adding a dependency to
template/pyproject.toml.jinja without running this script fails the template's suite.
"""

import argparse
import keyword
import re
import sys
from importlib import metadata
from pathlib import Path

import jinja2
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[1]
RESERVED = REPO / "includes" / "reserved_names.txt"
TEMPLATE = REPO / "template"
HEADER = """\
# package_name answers copier.yml refuses, one per line: the name, then what it clashes with
# (keyword, stdlib, project:PATH, or the distribution that installs a module of that name).
# Written by scripts/reserved_names.py, which says how each is found; names are only added.
"""
# Installed by the CUDA builds of torch that PyPI serves on Linux, which the CPU build in
# this environment does not declare, so the closure walked here never meets them; `--check`
# on a machine with a CUDA build does. Read from the wheels of torch 2.14.1's (cu13) Linux
# requirements and of the cu12 builds before it: every nvidia-* wheel (cuda-toolkit's
# extras, cudnn, nccl, nvshmem, cusparselt) installs into `nvidia`; cuda-bindings and
# cuda-pathfinder into `cuda`; triton into `triton`; cuda-toolkit installs no module.
CUDA_TORCH = {"triton": "triton", "nvidia": "nvidia-cuda-runtime-cu12", "cuda": "cuda-bindings"}
EVERY_VENV = [Requirement("pip")]  # `python -m pip` in the project's environment


def pyproject_of_template() -> dict:
    """template/pyproject.toml.jinja rendered with every logger (the most dependencies)."""
    questions = yaml.safe_load((REPO / "copier.yml").read_text())
    answers = {
        "package_name": "my_project",
        "description": "",
        "author_name": "",
        "author_email": "",
        "license": "MIT",
        "python_version": questions["python_version"]["default"],
        "loggers": list(questions["loggers"]["choices"].values()),
        "library_version": questions["library_version"]["default"],
    }
    text = (TEMPLATE / "pyproject.toml.jinja").read_text()
    return tomllib.loads(jinja2.Environment().from_string(text).render(answers))


def requirements(pyproject: dict) -> list[Requirement]:
    """What the project installs: its dependencies, every extra and every dependency group."""
    project = pyproject["project"]
    lines = list(project.get("dependencies", []))
    for extra in project.get("optional-dependencies", {}).values():
        lines += extra
    for group in pyproject.get("dependency-groups", {}).values():
        lines += [line for line in group if isinstance(line, str)]  # not {include-group}
    own = canonicalize_name(project["name"])
    return [*EVERY_VENV, *(r for r in map(Requirement, lines) if canonicalize_name(r.name) != own)]


def import_names(dist: metadata.Distribution) -> set[str]:
    """The top-level modules a distribution installs: top_level.txt and its RECORD's files."""
    names = set((dist.read_text("top_level.txt") or "").split())
    for path in dist.files or []:
        top = path.parts[0]
        if top in ("..", "__pycache__") or top.endswith((".dist-info", ".data")):
            continue
        if len(path.parts) > 1:
            names.add(top)
        elif path.suffix in (".py", ".so", ".pyd"):  # foo.py, foo.cpython-311-x86_64-linux-gnu.so
            names.add(top.split(".")[0])
    if not names and any(path.suffix == ".pth" for path in dist.files or []):
        # An editable install (the library, from core/) lists a .pth file, not its modules:
        # its import name is taken to be its normalized name.
        names.add(canonicalize_name(dist.metadata["Name"]).replace("-", "_"))
    return {name for name in names if name.isidentifier()}


def dependency_names(wanted: list[Requirement]) -> tuple[dict[str, str], list[str]]:
    """{import name: distribution} over the installed closure; the direct requirements missing."""
    names: dict[str, str] = {}
    missing: list[str] = []
    seen: set[tuple[str, frozenset[str]]] = set()
    queue = [(req, frozenset(), True) for req in wanted]  # (requirement, parent's extras, direct)
    while queue:
        req, parent_extras, direct = queue.pop(0)
        for_an_extra = req.marker is not None and "extra" in str(req.marker)
        if for_an_extra and not any(req.marker.evaluate({"extra": e}) for e in parent_extras):
            continue  # an extra nobody asked for
        key = (canonicalize_name(req.name), frozenset(req.extras))
        if key in seen:
            continue
        seen.add(key)
        try:
            dist = metadata.distribution(req.name)
        except metadata.PackageNotFoundError:
            if direct:
                missing.append(str(req))
            else:  # for another OS or Python
                names.setdefault(key[0].replace("-", "_"), req.name)
            continue
        for name in sorted(import_names(dist)):
            names.setdefault(name, dist.metadata["Name"])
        for line in dist.requires or []:
            queue.append((Requirement(line), frozenset(req.extras), False))
    return names, missing


def stdlib_names() -> set[str]:
    """The standard library's top-level modules on every Python copier.yml offers."""
    questions = yaml.safe_load((REPO / "copier.yml").read_text())
    oldest = min(tuple(map(int, v.split("."))) for v in questions["python_version"]["choices"])
    names = set(sys.stdlib_module_names) | {"test"}  # Python's own tests: not in the former
    versions = Path(metadata.distribution("typeshed_client").locate_file("typeshed_client"))
    for line in (versions / "typeshed" / "VERSIONS").read_text().splitlines():
        found = re.match(r"([\w]+): 3\.\d+-(?:3\.(\d+))?\s*(#.*)?$", line)
        if found and (found[2] is None or (3, int(found[2])) >= oldest):
            names.add(found[1])
    return names


def project_names() -> dict[str, str]:
    """The project's top-level folders."""
    return {
        path.name: f"project:{path.name}/"
        for path in TEMPLATE.iterdir()
        if path.is_dir() and path.name.isidentifier()
    }


def computed(pyproject: dict) -> tuple[dict[str, str], list[str]]:
    names = {name: "keyword" for name in keyword.kwlist}
    names.update({name: "stdlib" for name in stdlib_names()} | project_names())
    found, missing = dependency_names(requirements(pyproject))
    for name, dist in {**CUDA_TORCH, **found}.items():
        names.setdefault(name, dist)
    return {k: v for k, v in names.items() if k.isidentifier()}, missing


def read(path: Path = RESERVED) -> dict[str, str]:
    entries = (line.split() for line in path.read_text().splitlines())
    return {fields[0]: fields[1] for fields in entries if len(fields) == 2}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if stale")
    parser.add_argument("--pyproject", type=Path, help="a rendered project's pyproject.toml")
    args = parser.parse_args()
    pyproject = (
        tomllib.loads(args.pyproject.read_text()) if args.pyproject else pyproject_of_template()
    )
    names, missing = computed(pyproject)
    if missing:
        print(
            f"not installed here, so their import names are unknown: {', '.join(missing)}. "
            "Install the template's test group first (pip install --group test).",
            file=sys.stderr,
        )
        return 1
    have = read()
    new = {name: what for name, what in names.items() if name not in have}
    if args.check:
        if new:
            listed = ", ".join(f"{name} ({what})" for name, what in sorted(new.items()))
            print(
                f"{RESERVED.relative_to(REPO)} misses {listed}: run "
                "`python scripts/reserved_names.py` to add them.",
                file=sys.stderr,
            )
            return 1
        return 0
    lines = [f"{name} {what}" for name, what in sorted({**have, **new}.items())]
    RESERVED.write_text(HEADER + "\n".join(lines) + "\n")
    print(f"{RESERVED.relative_to(REPO)}: {len(new)} names added, {len(lines)} in all")
    return 0


if __name__ == "__main__":
    sys.exit(main())
