"""A sweep on disk: its folder, its Optuna study in a journal file, its trials' run roots.

```
runs/sweeps/<name>/
  optuna.journal       the study: every trial, its parameters, state, values, user attrs
  optuna.journal.cut   records found cut short at the journal's end (check_journal)
  sweep.lock           held by the one `sweep` process driving this folder
  trial-0000/          trial 0's run root (seeds: trial-0000/seed-<seed>/, one root each)
  slurm/               submitit's job files and logs (--launcher slurm)
```

The study lives in `JournalStorage(JournalFileBackend(...))`: an append-only file, safe
for several processes (trials report to it from their own `fit`), no database, readable
on a shared filesystem and by `optuna-dashboard runs/sweeps/<name>/optuna.journal`.
"""

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .spec import SpecError, SweepSpec, make_pruner, make_sampler

ALIVE_STATES = {"RUNNING", "WAITING"}


@dataclass
class Sweep:
    """Everything a trial needs, in any process: picklable for submitit's jobs."""

    spec: SweepSpec
    root: Path
    metric: str
    direction: str  # minimize | maximize
    fit_options: list[str]

    @property
    def journal(self) -> Path:
        return self.root / "optuna.journal"

    @property
    def lock(self) -> Path:
        return self.root / "sweep.lock"

    @property
    def slurm_folder(self) -> Path:
        return self.root / "slurm"

    def trial_root(self, number: int, seed: int | None = None) -> Path:
        root = self.root / f"trial-{number:04d}"
        return root if seed is None else root / f"seed-{seed}"

    def storage(self) -> Any:
        from optuna.storages import JournalStorage
        from optuna.storages.journal import JournalFileBackend

        self.root.mkdir(parents=True, exist_ok=True)
        return JournalStorage(JournalFileBackend(str(self.journal)))

    def study(self, sampling: bool = True) -> Any:
        """The study, created on first use; a rerun gets the same one back, checked unchanged.

        `sampling=False`: for telling results only. Its sampler samples nothing and has no
        `after_trial` hook: GridSampler's and BruteForceSampler's call `study.stop()`, which
        Optuna allows only inside `study.optimize`.
        """
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)  # no line per study load
        study = optuna.create_study(
            study_name=self.spec.name,
            storage=self.storage(),
            direction=optuna.study.StudyDirection[self.direction.upper()],
            sampler=make_sampler(self.spec) if sampling else optuna.samplers.RandomSampler(),
            pruner=make_pruner(self.spec.pruner, self.spec.path),
            load_if_exists=True,
        )
        identity = {**self.spec.identity(), "metric": self.metric}
        stored = study.user_attrs.get("identity")
        if stored is None:
            study.set_user_attr("identity", json.loads(json.dumps(identity)))
        elif stored != json.loads(json.dumps(identity)):
            changed = sorted(
                key for key in identity if stored.get(key) != json.loads(json.dumps(identity[key]))
            )
            raise SpecError(
                f"the sweep in {self.root} was started with another {', '.join(changed)} "
                f"(was: {', '.join(str(stored.get(k)) for k in changed)}). Its trials are only "
                "comparable under the same settings: restore them to resume it, or start a new "
                "sweep with `--name NEW_NAME` (its own folder runs/sweeps/NEW_NAME/)."
            )
        return study

    def check_journal(self) -> str | None:
        """Refuse a damaged journal before any trial starts; drop a record cut short at its end.

        Optuna appends one JSON record per line. Reading, it skips a last line without its
        line end (a write cut short) and fails on any other line that is no record; the next
        append fuses with a cut-short record into such a line. So, under the journal's own
        lock: a cut-short last record (a crash, a full disk, a truncated copy) is moved to
        optuna.journal.cut, where Optuna never read it; any other damage is a SpecError
        naming the file and the line, the file left as it is. Returns what was repaired.
        """
        from optuna.storages.journal import JournalFileSymlinkLock

        if not self.journal.is_file():
            return None
        lock = JournalFileSymlinkLock(str(self.journal))
        lock.acquire()
        try:
            note = _check_journal(self.journal)
        finally:
            lock.release()
        _check_replay(self.journal)
        return note

    def distributions(self) -> dict[str, Any]:
        return {key: param.distribution() for key, param in self.spec.space.items()}

    def fit_args(self, params: dict[str, Any]) -> list[str]:
        """The searched values as `fit` options, decoded from what Optuna stores."""
        from .spec import fit_value

        return [
            f"--{key}={fit_value(self.spec.space[key].decode(value))}"
            for key, value in params.items()
            if key in self.spec.space
        ]


def _check_journal(journal: Path) -> str | None:
    data = journal.read_bytes()
    *lines, tail = data.split(b"\n")  # tail: b"" when the last record ends its line
    for number, line in enumerate(lines, start=1):
        if (problem := _record_problem(line)) is not None:
            shown = line[:60].decode("utf-8", "replace")
            raise SpecError(
                f"{journal} is damaged: line {number} ({shown!r}) is {problem}. That file is "
                "the sweep's study (every trial, its values and state), so nothing was started "
                "and the file was left as it is. Restore it from a backup; or, if that line "
                "is no record Optuna wrote (something added to the file), delete it "
                f"(`sed -i.bak '{number}d' {journal}` keeps the damaged file as "
                f"{journal.name}.bak) and rerun: the sweep checks the file again first."
            )
    if not tail:
        return None
    cut = journal.with_name(f"{journal.name}.cut")
    with cut.open("ab") as out:
        out.write(tail + b"\n")
    with journal.open("r+b") as out:
        out.truncate(len(data) - len(tail))
        os.fsync(out.fileno())
    return (
        f"{journal} ended in a record cut short (a write a crash or a full disk interrupted; "
        f"Optuna never read it): moved its {len(tail)} bytes to {cut}"
    )


def _record_problem(line: bytes) -> str | None:
    """Why a line of the journal is not a record Optuna wrote; None when it is one."""
    try:
        record = json.loads(line)
    except ValueError:  # JSONDecodeError, UnicodeDecodeError
        return "not JSON"
    if not isinstance(record, dict) or not isinstance(record.get("op_code"), int):
        return "JSON but no Optuna record (no op_code)"
    return None


def _check_replay(journal: Path) -> None:
    """Every line is a record: Optuna must also be able to replay them, in order."""
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    try:
        JournalStorage(JournalFileBackend(str(journal))).get_all_studies()
    except Exception as error:  # a record out of place fails Optuna's replay with any type
        raise SpecError(
            f"{journal} holds records Optuna cannot replay ({type(error).__name__}: {error}): "
            "a line was removed or changed by hand. That file is the sweep's study, so "
            "nothing was started and the file was left as it is. Restore it from a backup, "
            "or start the sweep anew with `--name NEW_NAME` (its own folder)."
        ) from None


def trial_id(storage: Any, study_name: str, number: int) -> int:
    """The storage's id of trial `number` (Optuna's public storage API speaks in ids)."""
    study_id = storage.get_study_id_from_name(study_name)
    tid: int = storage.get_trial_id_from_study_id_trial_number(study_id, number)
    return tid
