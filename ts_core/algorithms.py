"""The methods a run can train with (docs/algorithm.md §4): the one list every other place derives from.

The config's `algorithm` field is typed with `AlgorithmName`, `ALGORITHMS` is its values in
table order, and each name has an overlay `data/presets/algorithms/<name>.yaml` that sets what
makes the method what it is (tests/unit/test_algorithms.py checks that the three agree). Adding a
method means adding it here and writing its overlay; the Literal is written out, not built from a
tuple, so type checkers and pydantic's error messages both see the names.
"""

from __future__ import annotations

from typing import Literal, get_args

AlgorithmName = Literal[
    "grpo", "dr_grpo", "seq_mix", "luffy", "prefix_context", "thinking_seeds", "thinking_seeds_adaptive"
]

# Order: the on-policy baselines first, then the off-policy methods, the paper's method last.
ALGORITHMS: tuple[str, ...] = get_args(AlgorithmName)
