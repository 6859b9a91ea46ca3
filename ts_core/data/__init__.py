"""data: what the model is asked and how its answers are scored.

Its modules:
    builtin_tasks.py          the built-in tasks (`data.source`): chain_sum, countdown, game24, each one record
    chain_sum.py, countdown.py, game24.py (+ *_data.py, sources.py)   the tasks, their splits, warm-up corpora
    rg_data.py                any reasoning-gym data set by name, or a mixture
    asdiv.py                  a public benchmark as a verl-schema file (`ts data asdiv`)
    prompts.py                one data-set row in memory (`Prompt`)
    dataset_file.py           reading a verl-schema file (ours or a user's) with one-line errors
    rewards.py, verdicts.py   the verifier (`Verifier`) and what it says of one response
    verifier_worker.py        what runs in the verifier's worker processes (spawned `ProcessPoolExecutor`)
    ray_pool.py               Ray verifier actors and the order-keeping fan-out with retries (cluster=ray);
                              Ray is imported only inside its functions
"""
