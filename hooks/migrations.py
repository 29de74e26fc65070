"""Migration steps that `copier update` runs when it crosses a release (copier.yml `_migrations`).

A release that changes the answer schema adds a `_migrations` entry calling one of these
steps with its own arguments; CHANGELOG.md says which release runs what. Copier runs
them in the project folder (it needs `--trust`), once per release crossed.

    python migrations.py rename-answer OLD NEW [--answers-file .copier-answers.yml]

rename-answer (stage "before"): a question was renamed. Copier reads the answers file
after the "before" migrations, so renaming the key there keeps the user's answer;
without it the renamed question silently falls back to its default. The file is edited
line by line, so its comments and the order of its keys survive.

    python migrations.py framework-imports PACKAGE

framework-imports (stage "after", v0.2.0): the framework moved from src/PACKAGE/ into
src/PACKAGE/framework/. The update deletes the old flat modules but never touches the
user's own files, whose imports of them then fail. This step rewrites what it can rewrite
exactly and lists the rest, file and line, with what to do by hand (CHANGELOG.md, v0.2.0).

    python migrations.py framework-rooms PACKAGE

framework-rooms (stage "after", v0.2.0): the framework's modules moved into rooms
(`framework.health` -> `framework.callbacks.health`). It rewrites those references in the
user's own files and configs/; old paths keep importing either way.
"""

import argparse
import ast
import io
import re
import subprocess
import sys
from pathlib import Path

import yaml  # a dependency of copier, whose interpreter runs this script


def rename_answer(answers_file: Path, old: str, new: str) -> int:
    if not answers_file.is_file():
        print(
            f"migration rename-answer: {answers_file} not found in {Path.cwd()}. Run "
            "`copier update` from the project root, or pass --answers-file if the project "
            "keeps its answers elsewhere.",
            file=sys.stderr,
        )
        return 1
    text = answers_file.read_text()
    answers = yaml.safe_load(text) or {}
    if old not in answers:
        print(f"migration rename-answer: no answer '{old}' to rename; nothing to do.")
        return 0
    if new in answers:
        print(
            f"migration rename-answer: {answers_file} holds both '{old}' and '{new}'. "
            f"Delete the line of the one you do not want, commit, and run the update again.",
            file=sys.stderr,
        )
        return 1
    # to_nice_yaml writes every answer as a top-level key at column 0.
    renamed = re.sub(rf"^{re.escape(old)}:", f"{new}:", text, count=1, flags=re.MULTILINE)
    answers_file.write_text(renamed)
    print(f"migration rename-answer: answer '{old}' renamed to '{new}' (kept {answers[old]!r}).")
    return 0


HEADER = "# Managed by the template; local edits are merged on update."

# What to do instead, for each v0.1.0 name that the framework's public API does not offer.
# CHANGELOG.md (v0.2.0, Action) says the same.
HAND_WORK = {
    "ResumableDataLoader": (
        "build the loader with `torchdata.stateful_dataloader.StatefulDataLoader` and the same "
        "arguments (Lightning saves its position in checkpoints)"
    ),
    "run_seed": (
        "draw random augmentation from torch's global RNG (`torch.rand`, `torch.randint`: "
        "seeded by `seed_everything`, and per worker) and let `__getitem__` take a plain "
        "index: loaders no longer pass `(epoch, index)` keys"
    ),
}


def public_api(framework: Path) -> dict[str, str]:
    """The framework's `PUBLIC` map (name -> module), read from the project just updated.

    The template keeps the list in one place, framework/__init__.py; reading it from the
    rendered project means a name added there is rewritten here without another edit.
    """
    tree = ast.parse((framework / "__init__.py").read_text(encoding="utf-8"))
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        if any(isinstance(target, ast.Name) and target.id == "PUBLIC" for target in targets):
            return ast.literal_eval(node.value)
    raise LookupError(f"no PUBLIC map in {framework / '__init__.py'}")


def moved_modules(package_dir: Path) -> dict[str, str]:
    """Modules and subpackages of framework/ that no longer exist at the package's top,
    each with where it is now under framework/ (`loaders` -> `platform.loaders`).

    Only imports of these are stale: a user module of the same name next to model.py (one
    the update did not delete) still imports as before and is left alone. Since v0.2.0 the
    framework's modules sit in rooms (framework/run/, callbacks/, ...): the shallowest
    module of a name is the one meant.
    """
    framework = package_dir / "framework"
    found: dict[str, str] = {}
    modules = [
        path.with_suffix("") for path in framework.rglob("*.py") if path.name != "__init__.py"
    ]
    packages = [path.parent for path in framework.rglob("*/__init__.py")]
    for path in sorted([*modules, *packages], key=lambda path: len(path.parts)):
        location = path.relative_to(framework).parts
        if len(location) <= 2:
            found.setdefault(location[-1], ".".join(location))
    return {
        name: location
        for name, location in found.items()
        if not (package_dir / f"{name}.py").exists()
        and not (package_dir / name / "__init__.py").exists()
    }


def read_lines(path: Path) -> list[str]:
    """The file's lines with their own line endings, so untouched lines stay byte for byte."""
    return io.StringIO(path.read_bytes().decode("utf-8"), newline="").readlines()


def user_sources(project: Path) -> list[Path]:
    """The Python files under src/ and tests/ that are the user's: those without the header."""
    paths = sorted([*project.glob("src/**/*.py"), *project.glob("tests/**/*.py")])
    return [path for path in paths if not path.read_bytes().startswith(HEADER.encode())]


def package_of(path: Path, project: Path) -> list[str] | None:
    """The package a file under src/ belongs to (what its relative imports start from)."""
    try:
        parts = list(path.relative_to(project / "src").with_suffix("").parts)
    except ValueError:
        return None  # tests/: relative imports there never reach the package
    return parts[:-1]


def resolve(node: ast.ImportFrom, package: list[str] | None) -> str | None:
    if node.level == 0:
        return node.module
    if package is None or node.level > len(package):
        return None
    base = package[: len(package) - node.level + 1]
    return ".".join([*base, node.module] if node.module else base)


class ImportRewriter:
    """Rewrites a project's stale imports; collects what it did and what it could not do."""

    def __init__(self, project: Path, package: str) -> None:
        self.project = project
        self.package = package
        package_dir = project / "src" / package
        self.public = public_api(package_dir / "framework")
        self.moved = moved_modules(package_dir)
        alternation = "|".join(sorted(map(re.escape, self.moved))) or "(?!)"
        self.reference = re.compile(rf"(?<![\w.])({re.escape(package)})\.({alternation})(?!\w)")
        # (file, line, what): printed in file and line order
        self.rewritten: list[tuple[str, int, str]] = []
        self.by_hand: list[tuple[str, int, str]] = []

    def hand(self, path: Path, line: int, what: str, action: str) -> None:
        self.by_hand.append((self.name(path), line, f"{what}: {action}"))

    def name(self, path: Path) -> str:
        return path.relative_to(self.project).as_posix()

    def not_public(self, name: str) -> str:
        if name in self.public:
            return f"import it from `{self.package}.framework` instead"
        return HAND_WORK.get(
            name,
            f"it is not in `{self.package}.framework`'s public API "
            f"({', '.join(sorted(self.public))}): copy what you need into your own code",
        )

    def python_file(self, path: Path) -> None:
        try:
            lines = read_lines(path)
            before = "".join(lines)
            tree = ast.parse(before)
        except (UnicodeDecodeError, SyntaxError) as error:
            self.hand(
                path,
                getattr(error, "lineno", None) or 1,
                "not read",
                f"{error}; check its imports by hand",
            )
            return
        seen: set[int] = set()
        nodes = [node for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))]
        for node in sorted(nodes, key=lambda n: (n.lineno, n.col_offset), reverse=True):
            if self.import_node(path, lines, node):
                seen.update(range(node.lineno, node.end_lineno + 1))
        for number, line in enumerate(lines, start=1):
            if number not in seen:
                for match in self.reference.finditer(line):
                    self.hand(
                        path,
                        number,
                        f"`{match.group(0)}`",
                        f"the module moved to `{self.package}.framework."
                        f"{self.moved[match.group(2)]}`; "
                        f"import what you use from `{self.package}.framework`",
                    )
        if "".join(lines) != before:
            path.write_bytes("".join(lines).encode("utf-8"))

    def import_node(self, path: Path, lines: list[str], node: ast.Import | ast.ImportFrom) -> bool:
        """Rewrite one import in `lines`, or record it as hand work; False if it is not stale."""
        module_import = f"import the names you use from `{self.package}.framework`, not the module"
        if isinstance(node, ast.Import):
            stale = [alias.name for alias in node.names if self.reference.match(alias.name)]
            for name in stale:
                self.hand(path, node.lineno, f"import {name}", module_import)
            return bool(stale)
        absolute = resolve(node, package_of(path, self.project))
        parts = (absolute or "").split(".")
        if parts[0] != self.package:
            return False
        if len(parts) == 1:  # `from . import loaders`
            stale = [alias.name for alias in node.names if alias.name in self.moved]
            for name in stale:
                self.hand(path, node.lineno, f"import of module {name}", module_import)
            return bool(stale)
        if parts[1] not in self.moved:
            return False
        rest = ".".join(parts[1:])
        names = [alias.name for alias in node.names]
        old = lines[node.lineno - 1]
        pattern = rf"(\bfrom\s+\.*\s*){re.escape(node.module or '')}(\s+import\b)"
        # A public name is one object wherever the framework now defines it (ProjectCLI
        # moved from cli.py to lightning_cli.py): `from <pkg>.framework import` finds it.
        exact = all(name in self.public for name in names)
        if exact and node.module and node.module.endswith(rest):
            module = node.module[: -len(rest)] + "framework"
            head, tail = old[: node.col_offset], old[node.col_offset :]
            new_tail, count = re.subn(pattern, rf"\g<1>{module}\g<2>", tail, count=1)
            if count:
                lines[node.lineno - 1] = head + new_tail
                change = f"{old.strip()} -> {(head + new_tail).strip()}"
                self.rewritten.append((self.name(path), node.lineno, change))
                return True
        for name in names:
            action = module_import if name == "*" else self.not_public(name)
            self.hand(path, node.lineno, name, action)
        return True

    def config_file(self, path: Path) -> None:
        """`<package>.<module>.Class` -> `<package>.framework.<room>.<module>.Class`, by line.

        Exact: each module moved whole. Only references to modules that are gone match,
        so template-owned presets (already right after the update) are never changed.
        """
        lines = read_lines(path)
        before = "".join(lines)
        for number, line in enumerate(lines, start=1):
            new = self.reference.sub(
                lambda match: f"{match.group(1)}.framework.{self.moved[match.group(2)]}", line
            )
            if new != line:
                lines[number - 1] = new
                self.rewritten.append((self.name(path), number, f"{line.strip()} -> {new.strip()}"))
        if "".join(lines) != before:
            path.write_bytes("".join(lines).encode("utf-8"))


def dropped_edits(project: Path) -> list[str]:
    """Template files the update deleted although the user had changed them.

    Copier deletes every file the new release no longer has, edited or not: an edit to
    src/<package>/loaders.py is not carried over to framework/loaders.py. Git still holds
    it; a template file committed more than once was changed after it was copied.
    """

    def git(*args: str) -> str:
        result = subprocess.run(["git", *args], cwd=project, capture_output=True, text=True)
        return result.stdout if result.returncode == 0 else ""

    return [
        name
        for name in git("ls-files", "--deleted", "-z").split("\0")
        if name.startswith(("src/", "tests/"))
        and git("show", f"HEAD:{name}").startswith(HEADER + "\n")
        and int(git("rev-list", "--count", "HEAD", "--", name) or 0) > 1
    ]


def framework_imports(project: Path, package: str) -> int:
    framework = project / "src" / package / "framework"
    if not (framework / "__init__.py").is_file():
        print(
            f"migration framework-imports: {framework}/__init__.py not found in {project}. Run "
            "`copier update` from the project root; if the file was deleted, `copier recopy` "
            "restores it (docs/updating.md, Recovering with recopy).",
            file=sys.stderr,
        )
        return 1
    rewriter = ImportRewriter(project, package)
    for path in user_sources(project):
        rewriter.python_file(path)
    for path in sorted([*project.glob("configs/**/*.yaml"), *project.glob("configs/**/*.yml")]):
        rewriter.config_file(path)
    for name in dropped_edits(project):
        rewriter.by_hand.append(
            (
                name,
                0,
                "you changed it, and the update deleted it with your changes (the framework "
                f"moved to src/{package}/framework/ and tests/framework/): `git log -p -- {name}` "
                "shows them; apply them again to the moved file",
            )
        )
    if not (rewriter.rewritten or rewriter.by_hand):
        print("migration framework-imports: none of your files imports the old flat modules.")
        return 0
    print(
        f"migration framework-imports: the framework moved to src/{package}/framework/ "
        "(CHANGELOG.md, v0.2.0). Review with `git diff` before you commit."
    )
    for path, line, change in sorted(rewriter.rewritten):
        print(f"  rewritten {path}:{line}: {change}")
    if any(path.endswith(".py") for path, _, _ in rewriter.rewritten):
        print(
            "  TO DO: the rewritten imports may be out of isort order; `ruff check --fix` "
            "(a dev dependency) sorts and merges them."
        )
    for path, line, action in sorted(rewriter.by_hand):
        print(f"  TO DO {path}:{line}: {action}" if line else f"  TO DO {path}: {action}")
    return 0


def room_moves(framework: Path) -> dict[str, str]:
    """The framework's `MOVED` map (old module -> its room), read from the project just updated.

    The template keeps it in one place, framework/platform/moved_modules.py, which also
    lets old paths import at run time.
    """
    path = framework / "platform" / "moved_modules.py"
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        if any(isinstance(target, ast.Name) and target.id == "MOVED" for target in targets):
            return ast.literal_eval(node.value)
    raise LookupError(f"no MOVED map in {path}")


def framework_rooms(project: Path, package: str) -> int:
    """`<package>.framework.health` -> `<package>.framework.callbacks.health` in the user's files.

    v0.2.0 put the framework's modules into rooms (run/, callbacks/, checkpoints/, tools/,
    platform/). Old paths still import (moved_modules.py), so nothing breaks; this step
    rewrites them where the user wrote them, so the project reads as the docs do: the
    user's Python files (those without the template's header), relative imports
    (`from .framework.loaders import ...`) included, and every YAML file under configs/.
    Only the module part of a reference changes; a second run changes nothing.
    """
    framework = project / "src" / package / "framework"
    if not (framework / "platform" / "moved_modules.py").is_file():
        print(
            f"migration framework-rooms: {framework}/platform/moved_modules.py not found in "
            f"{project}. Run `copier update` from the project root; if the file was deleted, "
            "`copier recopy` restores it (docs/updating.md, Recovering with recopy).",
            file=sys.stderr,
        )
        return 1
    moved = room_moves(framework)
    alternation = "|".join(sorted(map(re.escape, moved), key=len, reverse=True))
    reference = re.compile(
        rf"(?<![\w.])((?:{re.escape(package)}\.|\.+)framework)\.({alternation})(?!\w)"
    )
    configs = [*project.glob("configs/**/*.yaml"), *project.glob("configs/**/*.yml")]
    rewritten: list[str] = []
    for path in sorted([*user_sources(project), *configs]):
        lines = read_lines(path)
        changed = False
        for number, line in enumerate(lines, start=1):
            new = reference.sub(lambda match: f"{match.group(1)}.{moved[match.group(2)]}", line)
            if new != line:
                lines[number - 1], changed = new, True
                name = path.relative_to(project).as_posix()
                rewritten.append(f"  rewritten {name}:{number}: {line.strip()} -> {new.strip()}")
        if changed:
            path.write_bytes("".join(lines).encode("utf-8"))
    if not rewritten:
        print("migration framework-rooms: none of your files names a module that moved.")
        return 0
    print(
        f"migration framework-rooms: the framework's modules moved into rooms under "
        f"src/{package}/framework/ (CHANGELOG.md, v0.2.0). Review with `git diff`."
    )
    print("\n".join(rewritten))
    return 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="migrations.py", description=__doc__.split("\n")[0])
    steps = parser.add_subparsers(dest="step", required=True)
    rename = steps.add_parser("rename-answer", help="rename a question's key in the answers file")
    rename.add_argument("old")
    rename.add_argument("new")
    rename.add_argument("--answers-file", type=Path, default=Path(".copier-answers.yml"))
    imports = steps.add_parser(
        "framework-imports", help="point the user's imports at src/PACKAGE/framework/"
    )
    imports.add_argument("package")
    rooms = steps.add_parser(
        "framework-rooms", help="point the user's references at the framework's rooms"
    )
    rooms.add_argument("package")
    args = parser.parse_args(argv)
    if args.step == "framework-imports":
        return framework_imports(Path.cwd(), args.package)
    if args.step == "framework-rooms":
        return framework_rooms(Path.cwd(), args.package)
    return rename_answer(args.answers_file, args.old, args.new)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
