"""The stages of one Thinking Seeds iteration (docs/algorithm.md §2), by name: `STAGE_FUNCS[stage](session, k)`.

Each stage body is a plain function in its own module (`stage_<name>.py`): it reads only the run
directory, writes its outputs atomically as typed rows (`rows.py`) and returns a Manifest of what it
wrote. `thinking_seeds.pipeline.loop.run_stage` is the one place that records the manifest and skips
a stage whose outputs are intact; the plain loop and the Prefect tasks both go through it.

    graph.py            stage names and order, what each reads (upstream_of), when evaluate is due
    session.py          what a process's stages share: config, prompts, the cached engine, verifier
    rows.py             PrefixRow, RolloutRow: the Parquet tables the stages hand each other
    update_launcher.py  the update through `accelerate launch` (the command; one launch per update)
    trainer_client.py   the run's persistent trainer: launched once, sent every update (a socket)
    policy_chain.py     where θ_k is (memory or a checkpoint), its identity, the replay that brings it back
    stage_*.py          prepare, snapshot, seeds, continuation, verify, update, evaluate
    adaptive_seeding.py seeds and continuation with prefix.when=on_failure (else the plain bodies)
"""

from __future__ import annotations

from thinking_seeds.pipeline.adaptive_seeding import continuation_stage, seeds_stage
from thinking_seeds.pipeline.stage_evaluate import evaluate
from thinking_seeds.pipeline.stage_snapshot import snapshot
from thinking_seeds.pipeline.stage_update import update
from thinking_seeds.pipeline.stage_verify import verify

__all__ = ["STAGE_FUNCS"]

STAGE_FUNCS = {
    "snapshot": snapshot,
    "seeds": seeds_stage,
    "continuation": continuation_stage,
    "verify": verify,
    "update": update,
    "evaluate": evaluate,
}
