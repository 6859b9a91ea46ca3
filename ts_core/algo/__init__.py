"""algo: the algorithm as pure torch, no I/O (no file, no process, no Prefect); everything above calls it.

Its modules:
    losses.py             the loss, in one file: prefix surrogates registered by name (`register_surrogate`)
                          or a user's by import path (`prefix.loss=package.module:function`);
                          `LossSettings.from_config`
    populations.py        the loss's statistics by token population (their names in population_names.py,
                          torch-free, for the report and `ts sql`)
    advantages.py         group-relative advantages, registered by name
    seeding.py            where a seed ends: prefix cuts by token, by line, or after exactly n steps
    adaptive_seeding.py   prefix.when=on_failure: which prompts get seeds
    metrics.py            pass@k, avg@k, entropies
    stats.py              statistics that combine exactly across micro-batches and processes (SUM/MAX)
    dynamic_sampling.py   rollout.filter_groups: keep the groups that carry a learning signal
    overlong.py           reward.overlong: what a response cut by the token budget does to the update
    rollout_correction.py loss.rollout_correction: the engine's policy against the trainer's, weights and KL
"""
