"""θ from the persistent trainer's process to the pipeline's: shared memory vs the socket vs a file.

    python bench/weight_handoff.py [--mb 540] [--rounds 3]

A child process (the trainer's stand-in) holds a state dict of --mb megabytes of fp32 tensors (the
shapes of a small Llama's layers) and hands it to this process, in interleaved rounds, three ways:

    shm     safetensors file in /dev/shm, read with load_file, unlinked
    socket  each tensor's bytes through a Unix socket, received into preallocated tensors (what
            transports/weights.py send_weights / receive_weights do: it measured faster)
    disk    the per-iteration checkpoint of before: save_file in a folder, fsync, sha256, load_file

and prints seconds per GB for each and the ratio to shm.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import socket
import statistics
import sys
import tempfile
import time
from multiprocessing import get_context
from pathlib import Path

import torch


def make_state(mb: int) -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    n, out, i = mb * 2**20 // 4, {}, 0
    while n > 0:
        rows = min(n // 1024, 1024) or 1
        out[f"layer.{i}.weight"] = torch.randn(rows, 1024)
        n -= rows * 1024
        i += 1
    return out


def child(conn_fd: int, mb: int, shm: str, disk: str) -> None:
    from safetensors.torch import save_file

    state = make_state(mb)
    sock = socket.socket(fileno=conn_fd)
    f = sock.makefile("rwb")
    f.write((json.dumps({k: list(v.shape) for k, v in state.items()}) + "\n").encode())
    f.flush()
    for line in f:
        how = line.decode().strip()
        if how == "stop":
            break
        if how == "shm":
            path = Path(shm) / "weights.safetensors"
            save_file(state, str(path))
            f.write(f"{path}\n".encode())
        elif how == "disk":
            path = Path(disk) / "model.safetensors"
            save_file(state, str(path))
            fd = os.open(path, os.O_RDONLY)
            os.fsync(fd)
            os.close(fd)
            h = hashlib.sha256()
            with open(path, "rb") as g:
                for chunk in iter(lambda: g.read(1 << 20), b""):
                    h.update(chunk)
            f.write(f"{path}\n".encode())
        else:  # socket
            f.write(b"go\n")
            for t in state.values():
                f.write(memoryview(t.contiguous().view(torch.uint8).numpy()))  # no copy: as trainer_server
        f.flush()


def receive(f, how: str, shapes: dict) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    f.write(f"{how}\n".encode())
    f.flush()
    line = f.readline().decode().strip()
    if how in ("shm", "disk"):
        out = load_file(line)
        if how == "shm":
            os.unlink(line)
        return out
    out = {}
    for k, shape in shapes.items():
        t = torch.empty(shape)
        buf = memoryview(t.view(torch.uint8).numpy())
        got = 0
        while got < len(buf):
            got += f.readinto(buf[got:]) or 0
        out[k] = t
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mb", type=int, default=540, help="state dict size (SmolLM2-135M in fp32: ~540 MB)")
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    shm = tempfile.mkdtemp(prefix="ts-bench-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    disk = tempfile.mkdtemp(prefix="ts-bench-disk-", dir=".")
    parent, kid = socket.socketpair()
    p = get_context("fork").Process(target=child, args=(kid.fileno(), a.mb, shm, disk))
    p.start()
    f = parent.makefile("rwb")
    shapes = json.loads(f.readline())
    want = make_state(a.mb)
    times: dict[str, list[float]] = {"shm": [], "socket": [], "disk": []}
    for _ in range(a.rounds):
        for how in times:  # interleaved
            t = time.perf_counter()
            got = receive(f, how, shapes)
            times[how].append(time.perf_counter() - t)
            assert all(torch.equal(got[k], want[k]) for k in want), f"{how} changed the weights"
    f.write(b"stop\n")
    f.flush()
    p.join()
    gb = a.mb / 1024
    base = statistics.median(times["shm"])
    print(f"weight hand-over of {a.mb} MB, {a.rounds} interleaved rounds (median):")
    for how, ts in times.items():
        med = statistics.median(ts)
        print(f"  {how:6s} {med:7.3f} s  {med / gb:6.2f} s/GB  ratio to shm {med / base:5.2f}")
    import shutil

    shutil.rmtree(shm, ignore_errors=True)
    shutil.rmtree(disk, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
