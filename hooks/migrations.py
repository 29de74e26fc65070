"""Migration steps that `copier update` runs when it crosses a release (copier.yml `_migrations`).

A release that changes the answer schema adds a `_migrations` entry calling one of these
steps with its own arguments; CHANGELOG.md says which release runs what. Copier runs
them in the project folder (it needs `--trust`), once per release crossed.

    python migrations.py rename-answer OLD NEW [--answers-file .copier-answers.yml]

rename-answer (stage "before"): a question was renamed. Copier reads the answers file
after the "before" migrations, so renaming the key there keeps the user's answer;
without it the renamed question silently falls back to its default. The file is edited
line by line, so its comments and the order of its keys survive.
"""

import argparse
import re
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


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="migrations.py", description=__doc__.split("\n")[0])
    steps = parser.add_subparsers(dest="step", required=True)
    rename = steps.add_parser("rename-answer", help="rename a question's key in the answers file")
    rename.add_argument("old")
    rename.add_argument("new")
    rename.add_argument("--answers-file", type=Path, default=Path(".copier-answers.yml"))
    args = parser.parse_args(argv)
    return rename_answer(args.answers_file, args.old, args.new)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
