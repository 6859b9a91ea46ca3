"""θ handed over on the trainer's socket: its tensors' bytes, right after the answer line that names them.

Written by the trainer group's rank 0 (train/trainer_server.py: `weights_header` in the answer of an
update job with "handoff", then `send_weights`); read by the pipeline's process
(pipeline/trainer_client.py: `receive_weights`, straight into tensors of that process, which it then
holds in transports/live_weights.py for its engine). No file: measured against a safetensors file in
/dev/shm on the same bytes, the socket took 0.45-0.76x its time (bench/weight_handoff.py).

The header is [name, dtype, shape] per tensor, in the order their bytes follow; a tensor tied to an
earlier one (the same storage) is sent once, under the first name. A GPU tensor reaches the host through
pinned memory with a non-blocking copy, queued before the previous tensor's bytes are written, so the
device-to-host copy of tensor i+1 runs while the socket takes tensor i (`_on_host`; was one synchronous
`.to("cpu")` into pageable memory per tensor); at most two tensors' staging is held at a time. On CUDA
the hook for IPC handles instead of bytes is `send_weights` / `receive_weights`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator


def weights_header(state: dict) -> list[list]:
    """[name, dtype, shape] of each tensor `send_weights` sends (a tensor tied to an earlier one, once)."""
    return [[name, str(t.dtype).removeprefix("torch."), list(t.shape)] for name, t in _unique(state).items()]


def send_weights(f, state: dict) -> None:
    """θ's tensors for the pipeline's engine, their bytes straight after the answer line on the socket
    (no file; received by `receive_weights`)."""
    import torch

    for t in _on_host(_unique(state).values()):
        f.write(memoryview(t.reshape(-1).view(torch.uint8).numpy()))  # reshape: a 0-d tensor too
    f.flush()


def _on_host(tensors) -> Iterator:
    """Each tensor, contiguous on the host, in order; a GPU tensor's copy into pinned memory is queued
    (non-blocking, on the current stream: after the update's kernels) before the previous one is yielded."""
    pending = None
    for t in tensors:
        started = _start_copy(t.detach())
        if pending is not None:
            yield _finish(*pending)
        pending = started
    if pending is not None:
        yield _finish(*pending)


def _start_copy(t):
    import torch

    if t.device.type != "cuda":
        return t.to("cpu").contiguous(), None
    host = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)  # torch's caching host allocator reuses it
    host.copy_(t, non_blocking=True)
    done = torch.cuda.Event()
    done.record()
    return host, done


def _finish(host, done):
    if done is not None:
        done.synchronize()  # this tensor's copy only; the next one's keeps running
    return host


def receive_weights(f, header: list, closed: Callable[[], Exception]) -> dict:
    """θ's tensors, whose bytes follow the answer line (`send_weights`), read from the socket's file `f`
    straight into tensors of this process; `closed()` is raised if the socket closes before the last byte."""
    import torch

    out = {}
    for name, dtype, shape in header:
        t = torch.empty(shape, dtype=getattr(torch, dtype))
        buf, got = memoryview(t.reshape(-1).view(torch.uint8).numpy()).cast("B"), 0
        while got < len(buf):
            try:
                n = f.readinto(buf[got:])
            except ConnectionResetError:  # the sender died with unread bytes on the socket
                n = 0
            if not n:
                raise closed()
            got += n
        out[name] = t
    return out


def _unique(state: dict) -> dict:
    seen: set[tuple] = set()
    out = {}
    for name, t in state.items():
        key = (t.device, t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape))
        if key not in seen:
            seen.add(key)
            out[name] = t
    return out
