"""train: the update, and the supervised training around it.

    trainer.py          load θ_k, update, save θ_{k+1}: the state and the entry point of one update
    trainer_server.py   the persistent trainer: one `accelerate launch` per run, jobs over a socket
    resident.py         θ and AdamW kept between updates, by lineage; checkpoints written from it
    batch.py            the rollouts as a batch
    micro_batches.py    who trains on which sequences (fixed-size or token-budget micro-batches)
    micro_loss.py       one micro-batch's forward and loss (packed_scoring.py: the padding-free forward)
    update_loop.py      the optimizer steps; lr_schedule.py the lr ramp (and the warm-up's cosine)
    rollout_weights.py  loss.rollout_correction on the trainer's side
    strategy.py         ddp or fsdp2: θ_k read by rank 0 alone and broadcast into the other ranks' meta
                        parameters; gathered to rank 0 for the engine in its dtype, with AdamW only for a
                        checkpoint
    memory_plan.py      `ts plan`: the arithmetic per process and device; memory_fit.py whether it fits and
                        which key to change; memory_check.py the model's shape from config.json on the meta
                        device, and the check `ts train` runs first
    warmup.py           the base model's supervised warm-up (resumable: warmup_state.py; the chosen candidate,
                        its report and rebuild chain: warmup_report.py); smollm2.py builds builtin:smollm2
    sft.py              the supervised step shared by the warm-ups and the SFT control

The update runs in the pipeline's process (update.launcher=in_process), in the run's persistent trainer
(the default), or in one launch per update; the same `trainer.update_state` every way.
"""
