"""Weights are checked before use: a `.safetensors` file must be one, with the tensors the model expects.

A checkpoint's manifest vouches for its bytes, not for what they are: a run copied from elsewhere
can hold a pickle named `model.safetensors` with a manifest to match, or a tensor of another shape.
Loaders would then print a hundred-line SafetensorError or RuntimeError traceback (or, for a pickle
read by a careless loader, run code). Here the file's header -- 8 bytes of length, then JSON naming
each tensor's dtype, shape and byte range -- is read and checked on its own (no tensor is loaded,
nothing is unpickled), and its shapes are compared with the model's before anything is copied in
(the model a directory's config.json builds: store/checkpoints.py check_model_dir).
Errors are CheckpointError: one line naming the file and the tensor.
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Iterable, Mapping
from pathlib import Path

from thinking_seeds.store.checkpoint_format import CheckpointError
from thinking_seeds.store.contained import open_regular

__all__ = ["check_shapes", "model_shapes", "read_header"]

_MAX_HEADER = 100 * 1024 * 1024  # the safetensors library's own limit on the JSON header
_DTYPE_BYTES = {
    "BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
    "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8,
}  # fmt: skip


def _refuse(path: Path, why: str) -> CheckpointError:
    return CheckpointError(
        f"{path} is not a safetensors weights file ({why}); it is not loaded: replace it with the weights its "
        "run wrote (copy the run again from its source), or re-save the model with save_pretrained"
    )


def read_header(path: str | os.PathLike[str]) -> dict[str, tuple[str, tuple[int, ...]]]:
    """{tensor name: (dtype, shape)} from a .safetensors file's header, checked to describe the file
    exactly (every tensor's bytes inside the data, the data ending with the file); CheckpointError else.
    Reads the header only: no tensor, no pickle."""
    path = Path(path)
    # links followed: a Hugging Face cache links its files to blobs; a run's checkpoint files were
    # checked to stay inside it (verify_checkpoint) before this is called
    fd = open_regular(os.path.realpath(path))
    try:
        size = os.fstat(fd).st_size
        head = os.pread(fd, 8, 0)
        if len(head) < 8:
            raise _refuse(path, f"{size} bytes, shorter than a header")
        (n,) = struct.unpack("<Q", head)
        if n > min(_MAX_HEADER, size - 8):
            raise _refuse(path, "its first 8 bytes are not a header length: a pickle or another format?")
        raw = os.pread(fd, n, 8)
    finally:
        os.close(fd)
    try:
        header = json.loads(raw)
    except (UnicodeDecodeError, ValueError):
        raise _refuse(path, "its header is not JSON") from None
    if not isinstance(header, dict):
        raise _refuse(path, "its header is not a JSON object")
    out: dict[str, tuple[str, tuple[int, ...]]] = {}
    data = size - 8 - n
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype, shape, (begin, end) = entry["dtype"], tuple(entry["shape"]), entry["data_offsets"]
            count = 1
            for d in shape:
                if not isinstance(d, int) or d < 0:
                    raise ValueError
                count *= d
            ok = (
                dtype in _DTYPE_BYTES
                and isinstance(begin, int)
                and isinstance(end, int)
                and 0 <= begin <= end <= data
                and end - begin == count * _DTYPE_BYTES[dtype]
            )
        except (KeyError, TypeError, ValueError):
            ok = False
        if not ok:
            raise _refuse(path, f"its entry for tensor {name!r} is not a valid dtype, shape and byte range")
        out[name] = (dtype, shape)
    return out


def check_shapes(files: Iterable[Path], expected: Mapping[str, tuple[int, ...]]) -> None:
    """CheckpointError (one line: the file, the tensor, both shapes) when a tensor of `files` that the
    model has is of another shape. Names the model lacks are left to the loader's own check."""
    for f in files:
        for name, (_, shape) in read_header(f).items():
            want = expected.get(name)
            if want is not None and tuple(want) != shape:
                raise CheckpointError(
                    f"{f}: tensor {name!r} has shape {list(shape)} but the model expects {list(want)}; these are "
                    "weights of another model: it is not loaded (use the checkpoint its run wrote, or the "
                    "model.path it was trained from)"
                )


def model_shapes(model) -> dict[str, tuple[int, ...]]:
    """{name: shape} of a built model's state dict."""
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}
