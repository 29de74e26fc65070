"""A conformance cell refused before any work passes only where the caller accepts that refusal.

The matrix's cells themselves run in the template's suite (on real architectures) and in a
project's `pytest -m conformance` (on its own model); here the bookkeeping around one cell
is held, on a cell that refuses at once: what counts as an accepted refusal, and the
`conformance-refusals` table a project writes in its pyproject.toml.
"""

from pathlib import Path

import pytest

from copier_lightning_core.platform.project import project_root, project_settings
from copier_lightning_core.testing import conformance
from copier_lightning_core.testing.matrix import Arch, CellFailed, Matrix, Refused

PARAGRAPH = (
    "error: --trainer.devices 2 needs 2 devices; this machine has 1: use --trainer.devices 1."
)


@pytest.fixture
def refusing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Matrix:
    """The project's matrix, whose ddp cell is refused before any work."""

    def refuse(m: Matrix, arch: str, scratch: Path) -> None:
        raise Refused(PARAGRAPH)

    monkeypatch.setitem(conformance.CELL_FUNCTIONS, "ddp", refuse)
    return Matrix(project_root(), tmp_path, {"own": Arch()})


def test_an_accepted_refusal_is_recorded_with_its_paragraph(refusing: Matrix) -> None:
    record = conformance.run_cell(refusing, "own", "ddp", expected="needs 2 devices")
    assert record["outcome"] == "refused"
    assert record["detail"] == PARAGRAPH
    assert refusing.results["own-ddp"]["outcome"] == "refused"


@pytest.mark.parametrize("expected", [None, "words the paragraph lacks"])
def test_any_other_refusal_fails_the_cell(refusing: Matrix, expected: str | None) -> None:
    with pytest.raises(CellFailed, match=r"refused: error: --trainer\.devices 2"):
        conformance.run_cell(refusing, "own", "ddp", expected=expected)
    assert refusing.results["own-ddp"]["outcome"] == "fail"


def test_a_cell_that_runs_where_a_refusal_is_expected_fails(
    refusing: Matrix, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(conformance.CELL_FUNCTIONS, "ddp", lambda m, arch, scratch: None)
    with pytest.raises(CellFailed, match="expected a refusal"):
        conformance.run_cell(refusing, "own", "ddp", expected="needs 2 devices")


def test_the_projects_settings_table_is_read_from_the_nearest_pyproject(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        '[tool.copier-lightning-core]\npackage = "mine"\n'
        'conformance-refusals = {fsdp2 = "needs CUDA"}\n'
    )
    (tmp_path / "src" / "mine").mkdir(parents=True)
    settings = project_settings(tmp_path / "src" / "mine")
    assert settings == {"package": "mine", "conformance-refusals": {"fsdp2": "needs CUDA"}}
    assert project_settings(Path("/")) == {}


def test_a_shared_run_that_fails_without_a_message_fails_each_cell_naming_its_class(
    tmp_path: Path,
) -> None:
    matrix = Matrix(project_root(), tmp_path, {"own": Arch()})

    def fails() -> Path:
        raise CellFailed()

    for _ in range(2):  # the first call runs it, the second reads its recorded failure
        with pytest.raises(CellFailed, match=r"^the own reference run failed: CellFailed$"):
            matrix.once(("own", "reference"), fails)
