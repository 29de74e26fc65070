"""Each installable render runs its own tests, and the library's suite runs in a render.

A generated project's plain `pytest` runs the owner's tests and the library's contract on
the configured model (tests/test_contract.py). The library's own suite (core/tests: every
preset, signal and tool on toy models) needs a project's configs, so it runs with a
render's folder as its working folder (`library_tests_pass`): the whole suite once, in
`defaults`, and where an answer changes what it tests (the loggers) in that render too.

The renders share this virtualenv (installed with --no-deps): one environment, many
projects, as the generated projects' own CI would run them.

What each render runs, and why (RUNS):

- `defaults` runs its own tests, and the library's whole suite in parts, each part a
  `pytest` of its own, so that a parallel run (`pytest -n`) runs the parts side by side.
  The part `rest` is the suite less the files the others name: a new test file is run
  there without being listed, a renamed one fails its part (pytest finds no such file).
  test_resume.py's in-process resumed fits start loader workers; a refusal in a loader
  method (test_bad_input.py, same part) once made every later loader of the process keep
  its workers, and a garbage collection then waited 5 s on each. It no longer does
  (test_loaders.py proves it), so the two share a part.
- `all_loggers` runs the library's tests where the loggers answer reaches: the tests that
  read what the loggers wrote (metrics, hyperparameters, a logger's run continued on
  resume, `compare`, the default config's fit), chosen by name (ALL_LOGGERS_TESTS), and the
  signal and lock tests, which kill fits with every configured logger running (wandb's and
  mlflow's own processes among them); `-m "not slow"` (the slow tests do not depend on the
  answers). The other tests of those files fit through the loggers without reading them:
  the defaults render runs them. Not its own tests: every contract run sets
  `--trainer.logger=false`, so it is the same on every render.
- `no_ci` differs from `defaults` in the CI workflow, the license, the README's update
  section, nox's lint session and the pre-commit hooks (no zizmor without workflows): after
  proving that its pyproject installs, it runs the one library test that reads any of them,
  the checklist's (every item a hook of .pre-commit-config.yaml). The configs and commands
  are the defaults render's, which runs the rest.
"""

import pytest

from conftest import (
    LIBRARY_TESTS,
    assert_project_tests_pass,
    library_tests_pass,
    project_command,
)

DEEP = str(LIBRARY_TESTS)
# defaults: the library suite's parts (files of core/tests), the slowest first: a parallel
# run starts them in this order, and one that starts its longest parts first keeps every
# worker busy to its end. `rest` (no files named) is the files the other parts do not name.
# Times in three whole-suite runs on 2 CPU cores (2026-12-07, two of them clean clones'
# CI): data_recipes 150-161 s, sweep 98-114, the two halves of the smaller files 95-108
# each, the next three 70-90, down to export 34-39.
DEEP_PARTS: dict[str, list[str]] = {
    "data_recipes": ["test_data_recipes.py", "-k", "not memory_limit"],
    "sweep": ["test_sweep.py"],
    # half of the smaller files, named: with them, `rest` took 168 s and ended the run
    "compare-cli-trusted_classes-refusal-doctor": [
        "test_compare.py",
        "test_cli.py",
        "test_trusted_classes.py",
        "test_refusal.py",
        "test_doctor.py",
    ],
    "rest": [],
    # the memory cells write and read 3 GB each: a part of their own, beside the others
    "data_memory": ["test_data_recipes.py", "-k", "memory_limit"],
    "bad_input-sharding-resume": ["test_bad_input.py", "test_sharding.py", "test_resume.py"],
    "tune-train-checkpoints-health": [
        "test_tune.py",
        "test_train.py",
        "test_checkpoints.py",
        "test_health.py",
    ],
    "precommit-resolver": ["test_precommit.py", "test_resolver.py"],
    "presets": ["test_presets.py"],
    # its adapters test builds a peft module: the one part with the zoo on its path (ZOO_PARTS)
    "export": ["test_export.py"],
}
# Parts whose tests build the zoo's models (transformers, peft: conftest.ZOO), and only
# they get it on their path: importable, it costs every process about 1 s of its start.
ZOO_PARTS = {"export"}
NAMED = {name for names in DEEP_PARTS.values() for name in names if name.startswith("test_")}
# all_loggers: the files whose runs take the render's configured loggers (the answer this
# render changes), and of them the tests that read what a logger wrote, by name; the kill
# and lock tests run whole. test_resume.py (`--trainer.logger=false`) and test_sweep.py
# (CSV only) set their own and run in the defaults render alone.
ALL_LOGGERS = [
    "test_checkpoints.py",
    "test_compare.py",
    "test_health.py",
    "test_private_apis.py",
    "test_run_folders.py",
    "test_smoke.py",
    "test_train.py",
]
ALL_LOGGERS_TESTS = "logger or wandb or mlflow or tensorboard or version or compare or smoke or log"
ALL_LOGGERS_KILLS = ["test_run_root.py", "test_signals.py"]


def library_part(names: list[str]) -> list[str]:
    """A part's pytest arguments: its files (and options), or, for none, the unnamed files."""
    if not names:
        return [DEEP, *(f"--ignore={DEEP}/{name}" for name in sorted(NAMED))]
    return [f"{DEEP}/{word}" if word.startswith("test_") else word for word in names]


# id -> (render, the suite: the project's own tests or the library's, pytest arguments)
RUNS = {
    **{
        f"defaults-library-{part}": ("defaults", "library", library_part(names))
        for part, names in DEEP_PARTS.items()
    },
    "defaults-own": ("defaults", "own", []),
    "all_loggers-library": (
        "all_loggers",
        "library",
        ["-m", "not slow", "-k", ALL_LOGGERS_TESTS, *(f"{DEEP}/{n}" for n in ALL_LOGGERS)],
    ),
    "all_loggers-library-kills": (
        "all_loggers",
        "library",
        ["-m", "not slow", *(f"{DEEP}/{n}" for n in ALL_LOGGERS_KILLS)],
    ),
    "no_ci-library": ("no_ci", "library", [f"{DEEP}/test_checklist.py"]),
}


@pytest.mark.slow
@pytest.mark.parametrize("run", list(RUNS))
def test_generated_project_passes_its_own_and_the_librarys_tests(installed, run):
    name, suite, selection = RUNS[run]
    passes = library_tests_pass if suite == "library" else assert_project_tests_pass
    zoo = run.removeprefix(f"{name}-{suite}-") in ZOO_PARTS
    output = passes(installed(name), *selection, zoo=zoo)
    if zoo:  # its tests ran, not skipped for want of the zoo (`-ra` lists each skip's reason)
        assert "could not import" not in output, output[-3000:]


def test_plain_pytest_runs_the_owners_tests_and_the_contract(installed):
    """What `pytest` collects in a render: the owner's tests and the contract, nothing else."""

    def collected(*args: str) -> set[str]:
        result = project_command(
            installed("defaults"), "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args
        )
        return {line.split("::")[0] for line in result.stdout.splitlines() if "::" in line}

    fast = collected()
    assert fast == {
        f"tests/{name}.py" for name in ("test_accuracy", "test_contract", "test_data", "test_model")
    }, sorted(fast)
