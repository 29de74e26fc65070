"""CHECKLIST.md and what enforces it stay in step: every item names a real doctor check,
a real pre-commit hook, or `manual`; every doctor check is on the list."""

import re

import pytest
import yaml

from copier_lightning_core.platform.project import project_root
from copier_lightning_core.tools.doctor import CHECKS

ITEM = re.compile(r"^- \[ \] (?P<text>.+) \[(?P<tag>[^\]]+)\]$")


def items() -> list[tuple[str, str]]:
    lines = (project_root() / "CHECKLIST.md").read_text(encoding="utf-8").splitlines()
    boxes = [line for line in lines if line.startswith("- [")]
    parsed = [ITEM.match(line) for line in boxes]
    untagged = [box for box, match in zip(boxes, parsed, strict=True) if match is None]
    assert not untagged, f"items without a [DRnnn], [hook: id] or [manual] tag: {untagged}"
    return [(match["text"], match["tag"]) for match in parsed]


def hook_ids() -> set[str]:
    config = yaml.safe_load(
        (project_root() / ".pre-commit-config.yaml").read_text(encoding="utf-8")
    )
    return {hook["id"] for repo in config["repos"] for hook in repo["hooks"]}


def test_every_tag_is_known_and_every_check_is_listed():
    listed, hooks = set(), hook_ids()
    for text, tag in items():
        if tag.startswith("hook:"):
            unknown = {name.strip() for name in tag[5:].split(",")} - hooks
            assert not unknown, f"{text!r} names hooks not in .pre-commit-config.yaml: {unknown}"
        elif tag != "manual":
            ids = {name.strip() for name in tag.split(",")}
            assert ids <= set(CHECKS), f"{text!r} names unknown doctor checks: {ids - set(CHECKS)}"
            listed |= ids
    assert set(CHECKS) - listed == set(), "doctor checks missing from CHECKLIST.md"


@pytest.mark.parametrize(
    "lesson",
    [
        "Seeds fixed",
        "num_workers",
        "pin_memory",
        "torch.compile",
        "GradScaler",
        "set_device",
        "git commit",
        "torch version",
        ".item()",
        "inference_mode",
        "set_epoch",
        ".cuda()",
    ],
)
def test_the_list_keeps_each_lesson_with_its_reason(lesson):
    matching = [text for text, _ in items() if lesson in text]
    assert matching, f"no checklist item mentions {lesson}"
    assert all(len(text.split()) >= 8 for text in matching), matching  # the item says why
