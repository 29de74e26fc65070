"""Post-copy task: make the new project a git repository with a first commit.

Checkpoints record the git commit that produced them, so a project should have one from
day one. The task is idempotent: it does nothing when git is missing or when the
destination is already inside a repository (copying into an existing repo must not
create a nested one or commit the user's other work).

Usage (called by copier with the destination as working directory):
    python git_init.py AUTHOR_NAME AUTHOR_EMAIL
"""

import shutil
import subprocess
import sys


def git(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], capture_output=True, text=True, check=False)


def main(author_name: str, author_email: str) -> int:
    if shutil.which("git") is None:
        print("git not found: skipped `git init`; checkpoints will record no commit.")
        return 0
    if git("rev-parse", "--is-inside-work-tree").returncode == 0:
        print("Destination is already inside a git repository: left as it is.")
        return 0
    # Fall back to the project's author only where the user has no git identity.
    identity = []
    if not git("config", "user.name").stdout.strip():
        identity += ["-c", f"user.name={author_name}"]
    if not git("config", "user.email").stdout.strip():
        identity += ["-c", f"user.email={author_email}"]
    for step in (
        ["init", "--quiet"],
        ["add", "--all"],
        [*identity, "commit", "--quiet", "--no-verify", "-m", "Initial commit from copier-lightning"],
    ):
        result = git(*step)
        if result.returncode != 0:
            print(f"`git {' '.join(step)}` failed, project left uncommitted:\n{result.stderr}")
            return 0
    print("Initialised a git repository with a first commit.")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
