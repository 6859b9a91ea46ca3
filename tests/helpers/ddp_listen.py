"""A stand-in trainer for tests/integration/test_loopback_group.py: joins the gloo group the launch
set up (the same rendezvous and collectives as the trainer's), says so in READY_DIR/rank<R>, and
leaves when READY_DIR/go appears (at most 60 s)."""

import os
import sys
import time
from pathlib import Path

import torch.distributed as dist

ready = Path(sys.argv[1])
dist.init_process_group("gloo")
(ready / f"rank{dist.get_rank()}").write_text(str(os.getpid()))
end = time.monotonic() + 60
while not (ready / "go").exists() and time.monotonic() < end:
    time.sleep(0.1)
dist.barrier()
dist.destroy_process_group()
