"""The weights guard of the pre-commit hooks: names in any case, backups, disguised contents,
archives holding weights."""

import gzip
import io
import json
import pickle
import struct
import tarfile
import zipfile

import numpy as np
import pytest
import torch

from copier_lightning_core.checkpoints.weight_files import main, weight_kind


@pytest.mark.parametrize(
    "name",
    ["model.ckpt", "MODEL.CKPT", "weights.bin", "last.ckpt.bak", "model.pt~", "net.PTH",
     "w.safetensors", "model.onnx", "feats.npy", "epoch=3.ckpt.orig"],
)  # fmt: skip
def test_weight_names_are_refused_whatever_their_case_or_backup_suffix(tmp_path, name):
    path = tmp_path / name
    path.write_text("small\n")
    assert weight_kind(path) == "a checkpoint or weights file name"


@pytest.mark.parametrize(
    "name", ["train.py", "notes.md", "binary_search.py", "bin/run.sh", "pt.md"]
)
def test_ordinary_files_pass(tmp_path, name):
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("print('hello')\n")
    assert weight_kind(path) is None


def safetensors_bytes() -> bytes:
    header = json.dumps({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}).encode()
    return struct.pack("<Q", len(header)) + header + b"\x00" * 4


def torch_bytes() -> bytes:
    buffer = io.BytesIO()
    torch.save({"w": torch.zeros(2)}, buffer)
    return buffer.getvalue()


def numpy_bytes() -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, np.zeros(3))
    return buffer.getvalue()


@pytest.mark.parametrize(
    ("make", "kind"),
    [
        (torch_bytes, "torch checkpoint"),
        (lambda: pickle.dumps([1.0, 2.0], protocol=4), "pickle"),
        (safetensors_bytes, "safetensors"),
        (numpy_bytes, "NumPy"),
    ],
)
def test_weights_under_an_innocent_name_are_refused_by_content(tmp_path, make, kind):
    path = tmp_path / "notes.dat"
    path.write_bytes(make())
    assert kind in (weight_kind(path) or "")


def test_the_hook_names_each_refused_file_and_exits_1(tmp_path, capsys):
    bad, good = tmp_path / "Final.CKPT", tmp_path / "train.py"
    bad.write_text("x")
    good.write_text("x = 1\n")
    assert main([str(good)]) == 0
    assert main([str(good), str(bad)]) == 1
    assert str(bad) in capsys.readouterr().out


def tar_bytes(members: dict[str, bytes], mode: str) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode=mode) as archive:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def zip_bytes(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return buffer.getvalue()


ARCHIVES = {
    "backup.tar": lambda m: tar_bytes(m, "w"),
    "backup.tar.gz": lambda m: tar_bytes(m, "w:gz"),
    "backup.tgz": lambda m: tar_bytes(m, "w:gz"),
    "backup.tar.xz": lambda m: tar_bytes(m, "w:xz"),
    "backup.zip": zip_bytes,
    "backup.dat": lambda m: tar_bytes(m, "w:gz"),  # an archive by its bytes, not its name
}


@pytest.mark.parametrize("archive", ARCHIVES)
@pytest.mark.parametrize(
    ("member", "make", "kind"),
    [
        ("runs/last.ckpt", lambda: b"tiny", "a checkpoint or weights file name"),
        ("state.dat", torch_bytes, "a torch checkpoint"),
        ("table.txt", lambda: pickle.dumps([1.0], protocol=4), "a pickle"),
    ],
)
def test_an_archive_holding_weights_is_refused_naming_the_member(
    tmp_path, archive, member, make, kind
):
    path = tmp_path / archive
    path.write_bytes(ARCHIVES[archive]({"README.md": b"notes\n", member: make()}))
    assert (weight_kind(path) or "").startswith(f'an archive whose member "{member}" is {kind}')


def test_a_gzipped_file_is_refused_by_what_it_holds(tmp_path):
    checkpoint, table = tmp_path / "notes.gz", tmp_path / "table.json.gz"
    checkpoint.write_bytes(gzip.compress(torch_bytes()))
    table.write_bytes(gzip.compress(b'{"a": 1, "b": {"c": 2}}\n' * 9))
    assert weight_kind(checkpoint) == 'an archive whose member "notes" is ' + (
        "a torch checkpoint (torch.save's zip format)"
    )
    assert weight_kind(table) is None


@pytest.mark.parametrize("archive", ARCHIVES)
def test_an_archive_of_ordinary_files_passes(tmp_path, archive):
    path = tmp_path / archive
    path.write_bytes(ARCHIVES[archive]({"README.md": b"notes\n", "data/a.csv": b"x,y\n1,2\n"}))
    assert weight_kind(path) is None
