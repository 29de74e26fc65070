"""The user's own test of their own data (copied into the project with tagger.py)."""

from PACKAGE.tagger import CountingSequences


def test_targets_are_balanced_enough_to_learn():
    rows = CountingSequences(256, seed=1)
    positives = sum(row["target"] for row in rows.rows)
    assert 0.2 < positives / len(rows) < 0.8
