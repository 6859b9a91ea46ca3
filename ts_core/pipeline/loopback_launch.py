"""`python -m thinking_seeds.pipeline.loopback_launch ARGS`: `accelerate launch ARGS` for a trainer group
on one machine, with every port it opens bound to loopback.

accelerate runs torchrun in its own process, and torchrun's rendezvous store (torch's TCPStore: an
unauthenticated key-value server the ranks meet at) listens on every interface (`*:port`) whatever
address it is given. Here, in that process and before accelerate starts, the store's constructor in
torch's rendezvous modules is wrapped: the server side gets a socket already bound to 127.0.0.1
(`master_listen_fd`), so it never listens elsewhere. The collectives' own sockets are pinned to the
loopback interface too (GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME = lo, unless the user set them).
A group across machines (update.num_machines > 1) is launched by plain accelerate: its port must be
reachable from the other machines (docs/security.md).
"""

from __future__ import annotations

import os
import socket
import sys
from typing import Any

LOOPBACK = "127.0.0.1"
# torch modules that build the rendezvous store by the name TCPStore (torchrun's static and c10d
# rendezvous, and the helper torchelastic uses for its agent store)
_STORE_MODULES = (
    "torch.distributed.elastic.rendezvous.static_tcp_rendezvous",
    "torch.distributed.elastic.rendezvous.c10d_rendezvous_backend",
    "torch.distributed.elastic.rendezvous.dynamic_rendezvous",
    "torch.distributed.elastic.utils.distributed",
    "torch.distributed.rendezvous",
)


def _loopback_socket(port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((LOOPBACK, port))
    sock.listen(128)
    return sock


def _loopback_store(real: Any) -> Any:
    """A TCPStore factory whose server listens on 127.0.0.1 only (a client is made as before)."""
    keep: list[socket.socket] = []  # the listening sockets live as long as this process

    def make(host_name: str, port: int, *args: Any, **kwargs: Any) -> Any:
        names = ("world_size", "is_master", "timeout", "wait_for_workers", "multi_tenant", "master_listen_fd")
        given = dict(zip(names, args, strict=False))
        given.update(kwargs)
        if not given.get("is_master") or given.get("master_listen_fd") is not None:
            return real(host_name, port, **given)
        sock = _loopback_socket(int(port))
        keep.append(sock)
        given["master_listen_fd"] = sock.fileno()
        return real(LOOPBACK, sock.getsockname()[1], **given)

    return make


def bind_to_loopback() -> None:
    """Make every rendezvous store this process serves listen on loopback, and the collectives'
    sockets use the loopback interface (unless the user chose one)."""
    import importlib

    import torch.distributed as dist

    factory = _loopback_store(dist.TCPStore)
    for name in _STORE_MODULES:
        try:
            mod = importlib.import_module(name)
        except ImportError:
            continue
        if hasattr(mod, "TCPStore"):
            mod.TCPStore = factory
        if hasattr(getattr(mod, "dist", None), "TCPStore"):
            mod.dist = _DistWithStore(mod.dist, factory)
    if sys.platform.startswith("linux"):
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
        os.environ.setdefault("NCCL_SOCKET_IFNAME", "lo")


class _DistWithStore:
    """`torch.distributed` as a module that names it `dist`, with TCPStore replaced."""

    def __init__(self, dist: Any, factory: Any) -> None:
        self._dist, self.TCPStore = dist, factory

    def __getattr__(self, name: str) -> Any:
        return getattr(self._dist, name)


def main(argv: list[str] | None = None) -> None:
    bind_to_loopback()
    from accelerate.commands.launch import launch_command, launch_command_parser

    args = launch_command_parser().parse_args(sys.argv[1:] if argv is None else argv)
    launch_command(args)


if __name__ == "__main__":  # pragma: no cover - run as accelerate's launcher (update_launcher.launch_prefix)
    main()
