"""Migration steps that `copier update` runs when it crosses a release (copier.yml `_migrations`).

A release that changes the answer schema or moves files adds a `_migrations` entry calling
one of these steps with its own arguments; CHANGELOG.md says which release runs what.
Copier runs them in the project folder (it needs `--trust`), once per release crossed.

    python migrations.py rename-answer OLD NEW [--answers-file .copier-answers.yml]

rename-answer (stage "before"): a question was renamed. Copier reads the answers file
after the "before" migrations, so renaming the key there keeps the user's answer;
without it the renamed question silently falls back to its default. The file is edited
line by line, so its comments and the order of its keys survive.

    python migrations.py framework-library PACKAGE [--from REF]

framework-library (stage "after", v0.2.0): the framework that releases before v0.2.0 copied
into the project (v0.1.0: flat modules in src/PACKAGE/; later commits: src/PACKAGE/framework/,
first side by side, then in rooms) is the library copier-lightning-core. The update deletes
the copy, but never touches the owner's files, whose imports of it then fail. This step
rewrites what it can rewrite exactly, keeps a copy of every template file the update deleted
although the owner had changed it, and lists the rest, one line per file (docs/updating.md).
"""

import argparse
import ast
import difflib
import io
import re
import shutil
import subprocess
import sys
import tempfile
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
LIBRARY = "copier_lightning_core"
# The library as the release being updated to holds it: its sources in the template checkout
# copier runs this script from (`{{ _copier_conf.src_path }}/hooks/migrations.py`). Never
# imported: copier's interpreter need not have it installed, nor torch.
LIBRARY_SOURCES = Path(__file__).resolve().parents[1] / "core" / "src" / LIBRARY
# The folders of the copied framework; what is left in them after the update is the owner's.
OLD_FOLDERS = ("src/{package}/framework", "tests/framework")
# Where the owner's edits of deleted template files are kept, outside src/ and tests/ (not
# importable, not packaged, not collected by pytest).
KEPT = "framework.orphaned"
# v0.1.0's flat modules whose name is not a key of old_paths.MOVED (the modules as they
# stood side by side in framework/): callbacks.py held only the PredictionWriter.
FLAT_ONLY = {"callbacks": "callbacks.predictions", "cli": "cli"}

# What to do instead, for each name of a release before v0.2.0 that the library does not
# offer. CHANGELOG.md (v0.2.0, Action) says the same.
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


def literal(path: Path, name: str):
    """The value of the module-level `name = <literal>` in a Python file, without importing it."""
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        if any(isinstance(target, ast.Name) and target.id == name for target in targets):
            return ast.literal_eval(node.value)
    raise LookupError(f"no {name} in {path}")


class Library:
    """What copier-lightning-core holds, read from its sources: its public API (`PUBLIC` in
    `__init__.py`), where each module of the copied framework went (`MOVED` in
    platform/old_paths.py, which the library's checkpoint loader reads old class paths
    with), and the names each of its modules defines."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.public: dict[str, str] = literal(root / "__init__.py", "PUBLIC")
        self.moved: dict[str, str] = literal(root / "platform" / "old_paths.py", "MOVED")

    def source(self, module: list[str]) -> Path | None:
        """The file of `copier_lightning_core.<module>`, or None if the library has no such module."""
        base = self.root.joinpath(*module)
        if (base / "__init__.py").is_file():
            return base / "__init__.py"
        if module and base.with_suffix(".py").is_file():
            return base.with_suffix(".py")
        return None

    def names(self, module: list[str]) -> set[str]:
        """What `from copier_lightning_core.<module> import NAME` finds: the module's own
        names and imports, and a package's submodules."""
        path = self.source(module)
        if path is None:
            return set()
        found: set[str] = set()
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                found.add(node.name)
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                found.update(target.id for target in targets if isinstance(target, ast.Name))
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                found.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        if path.name == "__init__.py":
            found.update(
                child.stem
                for child in path.parent.iterdir()
                if child.suffix == ".py" or (child / "__init__.py").is_file()
            )
        return found

    def module(self, old: list[str], flat: bool) -> list[str] | None:
        """Where the library holds the module `<package>.framework.<old>` (flat: v0.1.0's
        `<package>.<old>`): rooms as they are, older names through MOVED."""
        if not old:
            return None if flat else []
        heads = {**self.moved, **FLAT_ONLY} if flat else self.moved
        head = heads.get(old[0], None if flat else old[0])
        if head is None:
            return None
        module = [*head.split("."), *old[1:]]
        return module if self.source(module) else None

    def reference(self, old: list[str], flat: bool) -> str | None:
        """`<package>.framework.<old>` (a module, a class, an attribute of one) as the library
        names it, or None when the library has no such thing."""
        if not flat and old and old[0] in self.public:
            return ".".join([LIBRARY, *old])
        for cut in range(len(old), -1, -1):
            module = self.module(old[:cut], flat)
            if module is None:
                continue
            rest = old[cut:]
            if not rest or rest[0] in self.names(module):
                return ".".join([LIBRARY, *module, *rest])
            if rest[0] in self.public:  # a public name that changed module (v0.1.0's cli.py)
                return ".".join([LIBRARY, *self.public[rest[0]].strip(".").split("."), *rest])
            return None
        return None

    def file_for(self, old: list[str], flat: bool) -> str | None:
        """The library's file holding what the old module file held, relative to core/src."""
        module = self.module(old, flat)
        source = self.source(module) if module is not None else None
        return source.relative_to(self.root.parent).as_posix() if source else None


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


class Rewriter:
    """Points the owner's references to the copied framework at the library; collects what it
    changed (line numbers per file) and what it could not do (file, line, what to do)."""

    def __init__(self, project: Path, package: str, library: Library) -> None:
        self.project, self.package, self.library = project, package, library
        package_dir = project / "src" / package
        # v0.1.0's flat modules the update deleted (an owner's module of such a name stays).
        self.flat = {
            name
            for name in {**library.moved, **FLAT_ONLY}
            if not (package_dir / f"{name}.py").exists() and not (package_dir / name).is_dir()
        }
        self.reference = re.compile(rf"(?<![\w.]){re.escape(package)}((?:\.\w+)+)")
        self.rewritten: dict[str, list[int]] = {}
        self.by_hand: list[tuple[str, int, str]] = []

    def name(self, path: Path) -> str:
        return path.relative_to(self.project).as_posix()

    def hand(self, path: Path, line: int, what: str) -> None:
        self.by_hand.append((self.name(path), line, what))

    def old_module(self, parts: list[str]) -> tuple[list[str], bool] | None:
        """(its path inside the copied framework, flat?) for `<package>.<parts>`, or None when
        that is not the copied framework's, or is a module the owner keeps in framework/."""
        if parts[:1] == ["framework"]:
            base = self.project / "src" / self.package
            for cut in range(2, len(parts) + 1):
                path = base.joinpath(*parts[:cut])
                if path.with_suffix(".py").is_file() or (path / "__init__.py").is_file():
                    return None
            return parts[1:], False
        if parts[:1] and parts[0] in self.flat:
            return parts, True
        return None

    def replace(self, found: re.Match) -> str:
        parts = found.group(1).lstrip(".").split(".")
        located = self.old_module(parts)
        if located is None:
            return found.group(0)
        new = self.library.reference(*located)
        return new if new is not None else found.group(0)

    def python_file(self, path: Path) -> None:
        try:
            lines = read_lines(path)
            before = "".join(lines)
            tree = ast.parse(before)
        except (UnicodeDecodeError, SyntaxError) as error:
            line = getattr(error, "lineno", None) or 1
            self.hand(path, line, f"not read ({error}): check its imports by hand")
            return
        seen: set[int] = set()
        nodes = [node for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)]
        for node in sorted(nodes, key=lambda n: (n.lineno, n.col_offset), reverse=True):
            if self.import_from(path, lines, node):
                seen.update(range(node.lineno, node.end_lineno + 1))
        for number in range(1, len(lines) + 1):
            if number not in seen:
                self.dotted(path, lines, number)
        if "".join(lines) != before:
            path.write_bytes("".join(lines).encode("utf-8"))

    def dotted(self, path: Path, lines: list[str], number: int) -> None:
        """`<package>.framework.<module>.Class` anywhere in a line -> the library's path."""
        line = lines[number - 1]
        new = self.reference.sub(self.replace, line)
        if new != line:
            lines[number - 1] = new
            self.rewritten.setdefault(self.name(path), []).append(number)
        for found in self.reference.finditer(new):
            if self.old_module(found.group(1).lstrip(".").split(".")) is not None:
                self.hand(
                    path,
                    number,
                    f"`{found.group(0)}`: the library has no such module or name; use what "
                    f"`{LIBRARY}` offers, or your own code",
                )

    def import_from(self, path: Path, lines: list[str], node: ast.ImportFrom) -> bool:
        """Rewrite one `from ... import ...` in `lines`, or record it as hand work; False if
        it does not import from the copied framework."""
        absolute = resolve(node, package_of(path, self.project))
        parts = (absolute or "").split(".")
        if parts[0] != self.package:
            return False
        names = [alias.name for alias in node.names]
        module_import = f"import the names you use from `{LIBRARY}` instead of the module"
        if len(parts) == 1:  # `from . import framework`, v0.1.0's `from . import loaders`
            stale = [name for name in names if self.old_module([name]) is not None]
            for name in stale:
                self.hand(path, node.lineno, f"import of module {name}: {module_import}")
            return bool(stale)
        located = self.old_module(parts[1:])
        if located is None:
            return False
        if all(name in self.library.public for name in names):
            target = LIBRARY
        else:
            module = self.library.module(*located)
            known = self.library.names(module) if module is not None else set()
            missing = [name for name in names if name not in known]
            if missing or module is None:
                for name in missing or names:
                    self.hand(path, node.lineno, f"{name}: {self.instead(name)}")
                return True
            target = ".".join([LIBRARY, *module])
        old = lines[node.lineno - 1]
        head, tail = old[: node.col_offset], old[node.col_offset :]
        pattern = rf"(\bfrom\s+)\.*\s*{re.escape(node.module or '')}(\s+import\b)"
        new_tail, count = re.subn(pattern, rf"\g<1>{target}\g<2>", tail, count=1)
        if not count:
            self.hand(path, node.lineno, f"from {absolute} import ...: import from `{target}`")
            return True
        lines[node.lineno - 1] = head + new_tail
        self.rewritten.setdefault(self.name(path), []).append(node.lineno)
        return True

    def instead(self, name: str) -> str:
        if name == "*":
            return f"import the names you use from `{LIBRARY}`"
        return HAND_WORK.get(
            name,
            f"the library has no such name: its public API is {', '.join(sorted(self.library.public))}"
            f" (`from {LIBRARY} import ...`); copy what you need into your own code",
        )

    def config_file(self, path: Path) -> None:
        lines = read_lines(path)
        before = "".join(lines)
        for number in range(1, len(lines) + 1):
            self.dotted(path, lines, number)
        if "".join(lines) != before:
            path.write_bytes("".join(lines).encode("utf-8"))


def git(project: Path, *args: str) -> bytes:
    return subprocess.run(["git", *args], cwd=project, capture_output=True, check=True).stdout


def committed(project: Path, name: str) -> bytes:
    """A file as the last commit holds it: the project before the update (copier refuses to
    update a project with uncommitted changes). `./`: relative to the project folder."""
    return git(project, "show", f"HEAD:./{name}")


def render_release(project: Path, ref: str, dest: Path) -> None:
    """What the template rendered at `ref` with the answers the project had before the update:
    the render copier's update replays (the template the answers name, every answer but
    copier's own), made again because copier's copy of it is gone by the "after" stage."""
    import copier  # the interpreter that runs this script is copier's

    answers = yaml.safe_load(committed(project, ".copier-answers.yml")) or {}
    source = str(answers["_src_path"])
    if (project / source).is_dir():  # a relative path is relative to the project
        source = str((project / source).resolve())
    copier.run_copy(
        source,
        str(dest),
        data={key: value for key, value in answers.items() if not key.startswith("_")},
        vcs_ref=ref,
        defaults=True,
        overwrite=True,
        quiet=True,
        unsafe=True,
        skip_tasks=True,
    )


def deleted_files(project: Path) -> list[str]:
    """The files the update deleted: committed, and gone from the working tree."""
    listed = git(project, "ls-files", "--deleted", "-z").decode("utf-8").split("\0")
    return sorted(name for name in listed if name)


def remove_emptied(project: Path, deleted: list[str]) -> None:
    """Remove the folders the update emptied but for bytecode caches of the deleted modules,
    which keep copier from removing them (src/<package>/framework/ after any test run), or
    for FILE.rej files keep_edits moved out."""
    folders = {parent for name in deleted for parent in Path(name).parents if parent.parts}
    for folder in sorted(folders, key=lambda path: len(path.parts), reverse=True):
        path = project / folder
        if path.is_dir() and all(child.name == "__pycache__" for child in path.iterdir()):
            shutil.rmtree(path)


def library_home(name: str, package: str, library: Library) -> str:
    """Where the library holds the code of a deleted template file."""
    parts = list(Path(name).with_suffix("").parts)
    if parts[:1] == ["tests"]:
        return "its own tests, which run in the library's repository"
    if parts[:2] != ["src", package]:
        return "the library"
    old = [part for part in parts[2:] if part != "__init__"]
    if old[:1] == ["framework"]:
        found = library.file_for(old[1:], flat=False)
    else:
        found = library.file_for(old, flat=True)
    return found or "the library"


def keep_edits(
    project: Path, package: str, library: Library, deleted: list[str], ref: str | None
) -> list[str]:
    """Copies of the template files the update deleted although the owner had changed them.

    Copier 9 deletes every file the new release no longer has, changed or not (with
    `--conflict rej` it leaves the owner's hunks in FILE.rej beside it). Each deleted file
    is compared with what the old release rendered; one that differs is written, as the
    owner had it, under framework.orphaned/ at its old path (its FILE.rej with it), and the
    edit itself to framework.orphaned/edits.diff. Returns the lines to print.
    """
    if not deleted:
        return []
    if ref is None:
        return [
            f"  TO DO: the update deleted {len(deleted)} template files; run this step again "
            "with --from <the release updated from> to learn which of them you had changed"
        ]
    printed: list[str] = []
    edits: list[str] = []
    with tempfile.TemporaryDirectory(prefix="framework-library-") as tmp:
        old = Path(tmp) / "old"
        try:
            render_release(project, ref, old)
        except Exception as error:  # whatever copier raises: the update itself is done
            return [
                f"  TO DO: could not render {ref}, the release updated from, to tell which of "
                f"the {len(deleted)} deleted template files you had changed "
                f"({type(error).__name__}: {error}); `git diff --stat HEAD` lists them and "
                "`git show HEAD:FILE` shows each as it was, until you commit"
            ]
        for name in deleted:
            pristine, mine = old / name, committed(project, name)
            if not pristine.is_file() or pristine.read_bytes() == mine:
                continue
            copy = project / KEPT / name
            copy.parent.mkdir(parents=True, exist_ok=True)
            copy.write_bytes(mine)
            rejected = project / f"{name}.rej"
            if rejected.is_file():
                shutil.move(rejected, copy.with_name(f"{copy.name}.rej"))
            edit = list(
                difflib.unified_diff(
                    pristine.read_bytes().decode("utf-8", "replace").splitlines(keepends=True),
                    mine.decode("utf-8", "replace").splitlines(keepends=True),
                    f"a/{name}",
                    f"b/{name}",
                )
            )
            edits.extend(line if line.endswith("\n") else f"{line}\n" for line in edit)
            added = sum(line.startswith("+") for line in edit[2:])
            removed = sum(line.startswith("-") for line in edit[2:])
            printed.append(
                f"  KEPT {name}: you had changed it (+{added} -{removed} lines against {ref}) "
                f"and the update deleted it; your copy: {KEPT}/{name}; the library holds "
                f"this code now: {library_home(name, package, library)}"
            )
    if edits:
        (project / KEPT / "edits.diff").write_text("".join(edits), encoding="utf-8")
        printed.append(
            f"  TO DO: your edits, against {ref}: {KEPT}/edits.diff. Carry what you still "
            "need into your own files (a subclass, a callback of yours in configs/) or "
            f"propose it to the library; then delete {KEPT}/"
        )
    return printed


def leftovers(project: Path, package: str) -> list[str]:
    """Files still in the copied framework's folders after the update: the owner's own."""
    return sorted(
        path.relative_to(project).as_posix()
        for folder in OLD_FOLDERS
        for path in (project / folder.format(package=package)).rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    )


def framework_library(project: Path, package: str, ref: str | None) -> int:
    if not (project / "src" / package).is_dir():
        print(
            f"migration framework-library: src/{package}/ not found in {project}. Run "
            "`copier update` from the project root.",
            file=sys.stderr,
        )
        return 1
    if not (LIBRARY_SOURCES / "platform" / "old_paths.py").is_file():
        print(
            f"migration framework-library: the library's sources are not at {LIBRARY_SOURCES} "
            "(this script reads them from the template's checkout, core/src/). Run it from "
            "the template repository's hooks/ folder, as copier does.",
            file=sys.stderr,
        )
        return 1
    library = Library(LIBRARY_SOURCES)
    deleted = deleted_files(project)
    kept = keep_edits(project, package, library, deleted, ref)  # moves their FILE.rej out too
    remove_emptied(project, deleted)
    rewriter = Rewriter(project, package, library)
    for path in user_sources(project):
        rewriter.python_file(path)
    for path in sorted([*project.glob("configs/**/*.yaml"), *project.glob("configs/**/*.yml")]):
        rewriter.config_file(path)
    for name in leftovers(project, package):
        rewriter.by_hand.append(
            (
                name,
                0,
                "yours, in a folder of the copied framework, which is gone: move it beside "
                "model.py (or into tests/) and its class paths in configs/ with it; the "
                "framework's test helpers (tests/framework/conftest.py, ...) are gone too",
            )
        )
    if not (rewriter.rewritten or rewriter.by_hand or kept):
        print("migration framework-library: none of your files names the copied framework.")
        return 0
    print(
        "migration framework-library: the framework is the library copier-lightning-core "
        f"now (pinned in pyproject.toml; `from {LIBRARY} import ...`): its copy in "
        f"src/{package}/ and tests/ is gone. Review with `git diff` before you commit."
    )
    for name, numbers in sorted(rewriter.rewritten.items()):
        lines = sorted(set(numbers))
        listed = ", ".join(map(str, lines))
        print(f"  rewritten {name}: line{'s' if len(lines) > 1 else ''} {listed}")
    if any(name.endswith(".py") for name in rewriter.rewritten):
        print(
            "  TO DO: the rewritten imports may be out of isort order; `ruff check --fix` "
            "(a dev dependency) sorts and merges them."
        )
    for line in kept:
        print(line)
    for name, line, action in sorted(rewriter.by_hand):
        print(f"  TO DO {name}:{line}: {action}" if line else f"  TO DO {name}: {action}")
    return 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="migrations.py", description=__doc__.split("\n")[0])
    steps = parser.add_subparsers(dest="step", required=True)
    rename = steps.add_parser("rename-answer", help="rename a question's key in the answers file")
    rename.add_argument("old")
    rename.add_argument("new")
    rename.add_argument("--answers-file", type=Path, default=Path(".copier-answers.yml"))
    library = steps.add_parser(
        "framework-library", help="point the user's files at copier-lightning-core"
    )
    library.add_argument("package")
    library.add_argument(
        "--from",
        dest="ref",
        help="the release updated from (copier's `_version_from`): to tell which deleted "
        "template files the user had changed",
    )
    args = parser.parse_args(argv)
    if args.step == "framework-library":
        return framework_library(Path.cwd(), args.package, args.ref)
    return rename_answer(args.answers_file, args.old, args.new)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
