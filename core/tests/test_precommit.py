"""The pre-commit hooks, run for real on a copy of the project the tests run in.

A copy, so a failing hook can never touch your working tree. Hook environments install
from PyPI once per test session (in $PRE_COMMIT_HOME when you set it, so reruns are fast).
"""

import gzip
import io
import os
import pickle
import random
import shutil
import string
import subprocess
import sys
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from copier_lightning_core.platform.project import project_root
from harness import PROJECT

pytestmark = pytest.mark.slow  # the first run builds the hooks' environments (~1 min)

GIT_IDENTITY = {
    "GIT_AUTHOR_NAME": "Test",
    "GIT_AUTHOR_EMAIL": "test@example.com",
    "GIT_COMMITTER_NAME": "Test",
    "GIT_COMMITTER_EMAIL": "test@example.com",
}


@pytest.fixture(scope="session")
def pre_commit_home(tmp_path_factory: pytest.TempPathFactory) -> str:
    return os.environ.get("PRE_COMMIT_HOME") or str(tmp_path_factory.mktemp("pre-commit-home"))


@dataclass
class Repo:
    root: Path
    env: dict

    def run(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            args, cwd=self.root, env=self.env, capture_output=True, text=True, check=False
        )

    def git(self, *args: str) -> str:
        result = self.run("git", *args)
        assert result.returncode == 0, result.stderr
        return result.stdout


@pytest.fixture
def repo(tmp_path: Path, pre_commit_home: str) -> Repo:
    """This project's tracked and unignored files, committed in a fresh repository."""
    project = project_root()
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=project,
        capture_output=True,
        text=True,
    )
    if listed.returncode != 0:
        pytest.skip(f"{project} is not a git repository, and pre-commit runs only in one")
    root = tmp_path / "project"
    for name in filter(None, listed.stdout.split("\0")):
        if (project / name).is_file():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(project / name, root / name)
    # `language: unsupported` hooks run `python` from PATH: this interpreter, like an
    # activated virtualenv.
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    env = {**os.environ, **GIT_IDENTITY, "PRE_COMMIT_HOME": pre_commit_home, "PATH": path}
    repo = Repo(root, env)
    repo.git("init", "-q")
    repo.git("add", "-A")
    repo.git("commit", "-q", "--no-verify", "-m", "copy")
    return repo


def test_the_project_passes_every_hook_and_nothing_changes(repo):
    result = repo.run(sys.executable, "-m", "pre_commit", "run", "--all-files")
    assert result.returncode == 0, result.stdout + result.stderr
    assert repo.git("status", "--porcelain") == ""


BAD_FILES = {
    "conflict-markers": ("notes.md", "<<<<<<< ours\nmine\n=======\ntheirs\n>>>>>>> theirs\n"),
    "rej-file": ("README.md.rej", "@@ -1 +1 @@\n-old\n+new\n"),
    "checkpoint": ("model.ckpt", "tiny but still a checkpoint\n"),
    "upper-case-checkpoint": ("MODEL.CKPT", "tiny but still a checkpoint\n"),
    "weights-bin": ("weights.bin", "tiny weights\n"),
    "checkpoint-backup": ("last.ckpt.bak", "a backup of a checkpoint\n"),
    "onnx": ("exported/model.onnx", "a model\n"),
    "hard-coded-cuda": (
        f"src/{PROJECT}/extra.py",
        "def to_gpu(x):\n    return x.cuda()\n",
    ),
}


def torch_checkpoint_bytes() -> bytes:
    buffer = io.BytesIO()
    torch.save({"state_dict": {"w": torch.zeros(3)}}, buffer)
    return buffer.getvalue()


def archive_bytes(name: str, member: str, data: bytes) -> bytes:
    """A .zip, or a tar compressed as `name` says, holding `member` next to a README."""
    buffer = io.BytesIO()
    if name.endswith(".zip"):
        with zipfile.ZipFile(buffer, "w") as archive:
            archive.writestr("README.md", "notes\n")
            archive.writestr(member, data)
        return buffer.getvalue()
    with tarfile.open(fileobj=buffer, mode="w:gz" if name.endswith("gz") else "w") as archive:
        for entry, content in (("README.md", b"notes\n"), (member, data)):
            info = tarfile.TarInfo(entry)
            info.size = len(content)
            archive.addfile(info, io.BytesIO(content))
    return buffer.getvalue()


def made_up(alphabet: str, length: int) -> str:
    """Random characters: no credential is ever written in this file."""
    return "".join(random.Random(length).choices(alphabet, k=length))


def aws_credentials() -> bytes:
    key_id = "AKIA" + made_up(string.ascii_uppercase + string.digits, 16)
    secret = made_up(string.ascii_letters + string.digits + "/+", 40)
    return f"[default]\naws_access_key_id = {key_id}\naws_secret_access_key = {secret}\n".encode()


def github_token() -> bytes:
    return f'TOKEN = "ghp_{made_up(string.ascii_letters + string.digits, 36)}"\n'.encode()


# Weights under a name that does not say so, inside archives, and credentials: refused by
# what the bytes are. Case -> (file name, its bytes, what the refusal says besides the name).
DISGUISED = {
    "torch-zip-as-dat": ("notes.dat", torch_checkpoint_bytes, "a torch checkpoint"),
    "pickle-as-txt": (
        "table.txt",
        lambda: pickle.dumps({"w": [0.0] * 3}, protocol=4),
        "a pickle",
    ),
    "checkpoint-in-tar": (
        "backup.tar",
        lambda: archive_bytes("backup.tar", "runs/last.ckpt", b"tiny"),
        'member "runs/last.ckpt"',
    ),
    "checkpoint-in-tar-gz": (
        "runs.tar.gz",
        lambda: archive_bytes("runs.tar.gz", "state.dat", torch_checkpoint_bytes()),
        'member "state.dat" is a torch checkpoint',
    ),
    "checkpoint-in-tgz": (
        "runs.tgz",
        lambda: archive_bytes("runs.tgz", "epoch=3.ckpt", b"tiny"),
        'member "epoch=3.ckpt"',
    ),
    "checkpoint-in-zip": (
        "results.zip",
        lambda: archive_bytes("results.zip", "model/weights.pt", b"tiny"),
        'member "model/weights.pt"',
    ),
    "checkpoint-gzipped": (
        "state.gz",
        lambda: gzip.compress(torch_checkpoint_bytes()),
        'member "state" is a torch checkpoint',
    ),
    "aws-key-pair": ("deploy/credentials.ini", aws_credentials, "AWS Access Key"),
    "github-token": (f"src/{PROJECT}/settings.py", github_token, "GitHub Token"),
}


@pytest.mark.parametrize("case", [*BAD_FILES, *DISGUISED])
def test_a_commit_with_a_bad_file_is_refused_naming_it(repo, case):
    says = ""
    if case in DISGUISED:
        name, make, says = DISGUISED[case]
        (repo.root / name).parent.mkdir(parents=True, exist_ok=True)
        (repo.root / name).write_bytes(make())
    else:
        name, text = BAD_FILES[case]
        (repo.root / name).parent.mkdir(parents=True, exist_ok=True)
        (repo.root / name).write_text(text)
    install = repo.run(sys.executable, "-m", "pre_commit", "install")
    assert install.returncode == 0, install.stdout + install.stderr
    repo.git("add", "--force", name)  # --force: *.ckpt is also git-ignored
    head = repo.git("rev-parse", "HEAD")
    result = repo.run("git", "commit", "-m", f"add {name}")
    assert result.returncode != 0, result.stdout
    assert name in result.stdout + result.stderr
    assert says in result.stdout + result.stderr
    assert repo.git("rev-parse", "HEAD") == head  # nothing was committed


def test_the_fixers_rewrite_text_but_never_a_binary_file_named_as_text(repo):
    # Bytes no text holds (NUL, 0x80-0xff that are not UTF-8), trailing blanks, no final
    # newline: the whitespace fixers would "fix" all three if they took it for text.
    binary = bytes(range(1, 256)) + b"\x00 values  \n\x00\x01 end  "
    names = ["assets/table.csv", "assets/lookup.txt"]
    for name in names:
        (repo.root / name).parent.mkdir(parents=True, exist_ok=True)
        (repo.root / name).write_bytes(binary)
    (repo.root / "notes.txt").write_text("trailing blanks  \nno final newline")
    install = repo.run(sys.executable, "-m", "pre_commit", "install")
    assert install.returncode == 0, install.stdout + install.stderr
    repo.git("add", *names, "notes.txt")

    fixed = repo.run("git", "commit", "-m", "add files")  # the fixers change notes.txt
    assert fixed.returncode != 0, fixed.stdout
    assert (repo.root / "notes.txt").read_text() == "trailing blanks\nno final newline\n"
    repo.git("add", "notes.txt")
    result = repo.run("git", "commit", "-m", "add files")
    assert result.returncode == 0, result.stdout + result.stderr
    for name in names:
        assert (repo.root / name).read_bytes() == binary
        assert repo.git("rev-parse", f"HEAD:{name}") == repo.git("hash-object", name)
