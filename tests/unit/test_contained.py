"""store/contained.py and store/weights_check.py on their own: what stays in a run, what is read."""

from __future__ import annotations

import hashlib
import os

import pytest
import torch
from safetensors.torch import save_file

from thinking_seeds.store.checkpoint_format import CheckpointError
from thinking_seeds.store.contained import OutsideRunError, bounded_hash, inside
from thinking_seeds.store.parquet_io import DataError
from thinking_seeds.store.weights_check import check_shapes, read_header


def test_inside_refuses_traversal_absolute_paths_and_links_out_and_keeps_links_in(tmp_path):
    run = tmp_path / "run"
    (run / "data").mkdir(parents=True)
    (run / "data" / "a.parquet").write_bytes(b"a")
    (tmp_path / "victim").write_bytes(b"v")
    (run / "data" / "in.parquet").symlink_to(run / "data" / "a.parquet")
    (run / "data" / "out.parquet").symlink_to(tmp_path / "victim")
    assert inside(run, "data/a.parquet") == run / "data" / "a.parquet"
    assert inside(run, "data/in.parquet") == run / "data" / "in.parquet"  # a link that stays in
    for bad in ("../victim", str(tmp_path / "victim"), "data/out.parquet", "data/../../victim"):
        with pytest.raises(OutsideRunError, match="outside it"):
            inside(run, bad)


def test_bounded_hash_refuses_a_fifo_a_link_and_a_file_over_the_bound(tmp_path, monkeypatch):
    f = tmp_path / "f"
    f.write_bytes(b"x" * 10)
    assert bounded_hash(f) == hashlib.sha256(b"x" * 10).hexdigest()
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(DataError, match="FIFO"):
        bounded_hash(tmp_path / "fifo")  # refused without waiting for a writer
    (tmp_path / "link").symlink_to(f)
    with pytest.raises(DataError, match="symbolic link"):
        bounded_hash(tmp_path / "link")
    assert bounded_hash(tmp_path / "link", follow=True) == bounded_hash(f)
    monkeypatch.setenv("TS_MAX_FILE_GB", "0.000000005")  # ~5 bytes
    with pytest.raises(DataError, match="TS_MAX_FILE_GB"):
        bounded_hash(f)


def test_a_safetensors_header_is_read_through_a_cache_link_and_a_pickle_is_refused(tmp_path):
    blob = tmp_path / "blobs" / "abc"
    blob.parent.mkdir()
    save_file({"w": torch.zeros(2, 3)}, str(blob))
    snap = tmp_path / "snapshots" / "rev"
    snap.mkdir(parents=True)
    (snap / "model.safetensors").symlink_to(blob)  # how a Hugging Face cache lays a model out
    assert read_header(snap / "model.safetensors") == {"w": ("F32", (2, 3))}
    with pytest.raises(CheckpointError, match=r"tensor 'w' has shape \[2, 3\] but the model expects \[3, 2\]"):
        check_shapes([snap / "model.safetensors"], {"w": (3, 2)})
    torch.save({"w": torch.zeros(2)}, tmp_path / "model.safetensors")
    with pytest.raises(CheckpointError, match="not a safetensors weights file"):
        read_header(tmp_path / "model.safetensors")
