"""pipeline: one run's iterations in this process, written once for the plain loop and the Prefect flow.

    graph.py, stages.py        the stage graph (order, what each reads, seeds) and `STAGE_FUNCS`
    stage_<name>.py            one module per stage body: prepare, snapshot, seeds, continuation, verify,
                               update, evaluate (each docstring says what the stage reads and writes)
    loop.py                    the plain loop, and `stage_outcome`: the one place a stage is run or skipped
    run_lifecycle.py           a run's life: open (lock, resume: resume.py), work ahead, close;
                               progress_lines.py their one-line views
    run_resources.py           what one run holds in this process, closed in one teardown; ctrl_c.py the
                               remembered Ctrl-C, per process
    session.py                 what a process's stages share: config, prompts, the engine, the verifier
    seed_plan.py               where seeds come from: draws, engine calls and cuts (seeds stage and seeded eval)
    adaptive_seeding.py        prefix.when=on_failure: θ_k's probe first, drafts only for the prompts it failed
    oversample.py              rollout.filter_groups: further rounds of prompts in the verify stage
    prefix_mismatch.py         loss.prefix_mismatch_metrics: the prefixes rescored by their writers
    work_ahead.py              work done ahead, held until its stage takes it: seeds_ahead.py (pipeline.overlap)
                               and groups_ahead.py (pipeline.max_staleness)
    policy_chain.py            where θ_k is (memory or a checkpoint), its identity, the replay that rebuilds it
    trainer_client.py          the persistent trainer's pipeline end; update_launcher.py one launch per update
                               (loopback_launch.py: a group of several processes on one machine, loopback only)
    checkpoint_eval.py, data_eval.py, export.py, policy_steps.py   `ts eval` and `ts export` on a run's steps

What the iteration does beyond the stage bodies' own docstrings:

- pipeline.seeds_block: the seeds of the coming iterations with the same pool (up to the next snapshot)
  are drafted in one go, each member's calls one after the other so its weights load once per block.
- pipeline.overlap (unset: on where it was measured to help: BENCHMARKS.md) samples the seeds of k+1
  beside update k; the rows wait in memory until seeds stage k+1 writes them and its manifest in its
  usual turn: the same files and manifests, in the same order, as without it (the switch is not in the
  config hash). The plain loop and the flow both sample in a thread (`run_lifecycle.sampled_ahead`); the
  update stays in the calling thread.
- pipeline.max_staleness = s > 0 (hashed when non-zero): the groups of k are θ_{k-s}'s, and the thread
  beside update k samples the groups of k+1 too. The ratio is taken against the engine log-probs of the
  policy that wrote the sample (π_old), or, with update.recompute_old_logprobs, against θ_k with
  loss.rollout_correction weighing θ_k against the writer (the config refuses recompute without it).
- θ_{k+1} reaches the engine in memory (transports/live_weights.py: the trainer's own tensors in process,
  their bytes on the socket from the persistent trainer; policy_chain.memory_handoff says when). LoRA and
  the per-update launch read it from its checkpoint, written at every step there.
"""
