# Managed by the template; local edits are merged on update.
"""A sweep on disk: its folder, its Optuna study in a journal file, its trials' run roots.

```
runs/sweeps/<name>/
  optuna.journal       the study: every trial, its parameters, state, values, user attrs
  sweep.lock           held by the one `sweep` process driving this folder
  trial-0000/          trial 0's run root (seeds: trial-0000/seed-<seed>/, one root each)
  slurm/               submitit's job files and logs (--launcher slurm)
```

The study lives in `JournalStorage(JournalFileBackend(...))`: an append-only file, safe
for several processes (trials report to it from their own `fit`), no database, readable
on a shared filesystem and by `optuna-dashboard runs/sweeps/<name>/optuna.journal`.
"""

import json
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
        trials = len(study.get_trials(deepcopy=False))
        if sampling and trials and "seed" in self.spec.sampler:
            # A seeded sampler made again by a rerun would draw its first values again.
            study.sampler = make_sampler(self.spec, seed_offset=trials)
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


def trial_id(storage: Any, study_name: str, number: int) -> int:
    """The storage's id of trial `number` (Optuna's public storage API speaks in ids)."""
    return storage.get_trial_id_from_study_id_trial_number(
        storage.get_study_id_from_name(study_name), number
    )
