"""Write the docs pages that restate files of the template, so they cannot drift.

    python scripts/docs_pages.py          # rewrite docs/presets/*.md, checklist.md, benchmark-results.md
    python scripts/docs_pages.py --check  # exit 1 when a page is out of date (the suite runs this)

Each preset page is the preset's own header (when / cost / traps) and its settings; the
checklist page is the generated project's CHECKLIST.md; the benchmark results page is
benchmarks/RESULTS.md, as benchmarks/report.py last wrote it. A project is rendered with the
package name `my_project`, the name the docs use throughout.
"""

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PRESETS = REPO / "template" / "configs" / "presets"
DOCS = REPO / "docs"
PACKAGE = "my_project"


def render(path: Path) -> str:
    """The file as a project named `my_project` holds it (the presets use no other answer)."""
    return path.read_text().replace("{{ package_name }}", PACKAGE)


def preset_page(path: Path) -> tuple[str, str]:
    name = path.name.removesuffix(".jinja").removesuffix(".yaml")
    lines = render(path).splitlines()
    header = [
        line[2:] if line.startswith("# ") else line.lstrip("#") for line in _leading_comments(lines)
    ]
    settings = "\n".join(lines[len(header) :]).strip()
    # The summary runs until the first "When:" / "Cost:" / "Traps:" or indented line.
    cut = next(
        (
            i
            for i, line in enumerate(header)
            if i and (line[:1] == " " or line.split(":")[0] in ("When", "Cost", "Traps"))
        ),
        len(header),
    )
    summary, details = " ".join(header[:cut]), "\n".join(header[cut:])
    page = (
        f"# {name}\n\n{summary}\n\n"
        f"```bash\npython -m {PACKAGE} fit --config configs/presets/{name}.yaml\n```\n\n"
        f"```text\n{details}\n```\n\n"
        f"## Settings\n\n```yaml\n{settings}\n```\n"
    )
    return name, page


def summary_of(page: str) -> str:
    return page.splitlines()[2]


def _leading_comments(lines: list[str]) -> list[str]:
    head = []
    for line in lines:
        if not line.startswith("#"):
            break
        head.append(line)
    return head


def pages() -> dict[Path, str]:
    presets = sorted(PRESETS.iterdir())
    out: dict[Path, str] = {}
    rows = []
    for path in presets:
        name, page = preset_page(path)
        out[DOCS / "presets" / f"{name}.md"] = page
        rows.append(f"| [{name}]({name}.md) | {summary_of(page)} |")
    out[DOCS / "presets" / "index.md"] = (
        "# Presets\n\n"
        "Small YAML files in `configs/presets/`, stacked on the default config with repeated\n"
        "`--config`; later files win, command-line options win over all of them:\n\n"
        f"```bash\npython -m {PACKAGE} fit --config configs/presets/bf16.yaml "
        "--config configs/presets/ddp.yaml\n```\n\n"
        "A preset that adds callbacks appends them (`callbacks+:`), so the default callbacks\n"
        "(checkpoints, provenance, resume state, health checks) stay active under every preset.\n\n"
        "| preset | what it is for |\n|---|---|\n" + "\n".join(rows) + "\n"
    )
    checklist = (REPO / "template" / "CHECKLIST.md.jinja").read_text()
    out[DOCS / "checklist.md"] = checklist.replace("{{ package_name }}", PACKAGE)
    out[DOCS / "benchmark-results.md"] = (REPO / "benchmarks" / "RESULTS.md").read_text()
    return out


def main(argv: list[str]) -> int:
    stale = [
        path for path, text in pages().items() if not path.exists() or path.read_text() != text
    ]
    if "--check" in argv:
        for path in stale:
            print(f"{path.relative_to(REPO)} is out of date: run python scripts/docs_pages.py")
        return 1 if stale else 0
    for path in stale:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(pages()[path])
        print(f"wrote {path.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
