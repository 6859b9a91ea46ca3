"""thinking-seeds core: the algorithm and its data. Pure Python + torch/transformers; never imports prefect.

One installable namespace, `thinking_seeds`, is built from the project's top-level folders (pyproject's
`package-dir`): this folder is the package itself; `tasks/` is `thinking_seeds.tasks` (Prefect tasks),
`flows/` is `thinking_seeds.flows` (the flows and the `ts` CLI), `data/` is `thinking_seeds.assets` (presets
and bundled models, as package data; `TS_MODELS_DIR` moves the models built from them). So a wheel installed
anywhere runs `ts train --preset tiny` (tests/e2e/test_wheel.py).

The layers, bottom to top, and the rule between them (a module imports only its own layer or those below):
ARCHITECTURE.md and tests/unit/test_layers.py. The top-level modules here belong to the bottom layer, config:

    algorithms.py   the algorithm registry (the overlays in data/presets/algorithms/)
    plugins.py      what a config names outside us: a reward fn or prefix loss by import path, reasoning-gym
                    task names, trackers; each checked before any work
    yaml_limits.py  YAML read within size, alias and depth limits
"""
