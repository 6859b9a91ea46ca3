"""The methods are listed once (thinking_seeds.algorithms); the config and the presets follow it."""

from __future__ import annotations

import typing

from thinking_seeds.algorithms import ALGORITHMS, AlgorithmName
from thinking_seeds.assets import PRESETS_DIR
from thinking_seeds.config import RunConfig


def test_the_config_field_is_the_registry():
    assert RunConfig.model_fields["algorithm"].annotation == AlgorithmName
    assert typing.get_args(RunConfig.model_fields["algorithm"].annotation) == ALGORITHMS


def test_every_method_has_exactly_one_overlay():
    assert sorted(p.stem for p in (PRESETS_DIR / "algorithms").glob("*.yaml")) == sorted(ALGORITHMS)
