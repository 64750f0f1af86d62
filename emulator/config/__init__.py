"""A run's configuration: YAML presets and files -> validated, frozen dataclasses.

- ``schema``    the ``Config`` of the sections and the checks across them
- ``job``, ``sections``, ``tiers``  the sections (model, parallelism, training; checkpoint, state,
                drain, run, metrics, cost, limits; tiers)
- ``loading``   presets, ``extends``, ``--set``: ``load_config``
- ``failures``  the ``failures:`` section (injected faults)
- ``mapping``   YAML mappings to frozen dataclasses and back, overrides, merging

Everything a caller needs is re-exported here; code outside this package imports
from ``emulator.config``, not from its modules.
"""
from emulator.config.failures import KILL_PHASES, CorruptConfig, FailuresConfig, GlobalFaultConfig, KillConfig
from emulator.config.loading import DEFAULT_PRESET, PRESETS_PACKAGE, load_config, preset_names
from emulator.config.schema import (CheckpointConfig, Config, DrainConfig, EmulateConfig, MetricsConfig, ModelConfig,
                                    ParallelismConfig, RunConfig, StateConfig, TierConfig, TiersConfig,
                                    TrainingConfig, from_mapping)

__all__ = [
    "CheckpointConfig", "Config", "CorruptConfig", "DEFAULT_PRESET", "DrainConfig", "EmulateConfig",
    "FailuresConfig", "GlobalFaultConfig", "KILL_PHASES", "KillConfig", "MetricsConfig", "ModelConfig",
    "PRESETS_PACKAGE", "ParallelismConfig", "RunConfig", "StateConfig", "TierConfig", "TiersConfig",
    "TrainingConfig", "from_mapping", "load_config", "preset_names",
]
