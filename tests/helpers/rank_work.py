"""The ranks of tests/e2e/test_rank_work.py: two gloo processes (torch.multiprocessing.spawn) with an
Accelerator as the update launcher makes one (`Accelerator(cpu=True)`, DDP). Each recomputes π_old (with
a spy on the micro-batches it scores), then trains one batch through `accelerator.prepare`'s DDP wrapper
with a comm hook that counts DDP's all-reduces, and writes what it saw to `out/rank{r}.pt`."""

from __future__ import annotations

import os
from pathlib import Path

import torch

# update.logprob_chunk_size=3: the chunked head under DDP; 14 sequences, 2 mini-batches of 7, shards of
# 4 and 3 per rank, micro-batches of 2: two micro-batches per optimizer step, 2 epochs (later epochs
# train on sequences the other rank scored).
SETS = [
    "update.logprob_chunk_size=3",
    "update.mini_batches=2",
    "update.micro_batch_size=2",
    "update.max_tokens_per_micro_batch=null",  # micro-batches of micro_batch_size sequences
    "update.epochs=2",
    "update.recompute_old_logprobs=true",
]


def run_rank(rank: int, world: int, port: int, out: str) -> None:
    os.environ.update(
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world),
        LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world), OMP_NUM_THREADS="1",
    )  # fmt: skip
    torch.set_num_threads(1)
    import torch.distributed as dist
    from accelerate import Accelerator
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

    from tests.unit.test_micro_batches import PAD, spread_batch, tiny_model
    from tests.unit.test_token_scores import config
    from thinking_seeds.engine.token_scores import supports_head_scores
    from thinking_seeds.train import update_loop

    acc = Accelerator(cpu=True)
    assert (acc.num_processes, acc.process_index) == (world, rank)
    model = tiny_model()  # seeded: the same θ on every rank
    batch = spread_batch(model)
    cfg = config(SETS)

    scored: list[tuple[int, ...]] = []  # the contexts of the sequences this rank scored for π_old
    real_score = update_loop.score

    def spy(m, mb, *args, **kwargs):
        scored.extend(tuple(c) for c in mb.contexts)
        return real_score(m, mb, *args, **kwargs)

    update_loop.score = spy
    try:
        diff = update_loop.recompute_old_logprobs(model, batch, cfg, PAD, world, rank)
    finally:
        update_loop.score = real_score
    own = [i for _, micro in update_loop.plan(batch, cfg, 0, rank, world) for idx in micro for i in idx]

    ddp, optimizer = acc.prepare(model, torch.optim.SGD(model.parameters(), lr=0.0))
    reduces: list[int] = []  # the bucket of each all-reduce DDP ran

    def counting_hook(group, bucket):
        reduces.append(bucket.index())
        return allreduce_hook(group, bucket)

    ddp.register_comm_hook(dist.group.WORLD, counting_hook)
    update_loop.train_on_batch(ddp, batch, cfg, PAD, optimizer, acc)
    order = list(range(len(batch)))
    steps = [
        micro for e in range(cfg.update.epochs) for _, micro in update_loop.plan(batch, cfg, e, rank, world, order)
    ]
    torch.save(
        {
            "scored": [batch.contexts.index(list(c)) for c in scored],
            "own": own,
            "old_logprobs": batch.old_logprobs,
            "diff": diff,
            "reduces": reduces,
            "micro_per_step": [len(m) for m in steps],
            "grads": {n.removeprefix("module."): p.grad.clone() for n, p in ddp.named_parameters()},
            "chunked": supports_head_scores(ddp),
        },
        Path(out) / f"rank{rank}.pt",
    )
    acc.wait_for_everyone()
    acc.end_training()  # destroys the process group: a gloo process exiting with it alive can abort
