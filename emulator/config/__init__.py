"""A run's configuration: YAML presets and files -> validated, frozen dataclasses.

- ``schema``    the sections (model, parallelism, training, checkpoint, state, drain,
                tiers, run, metrics), presets, ``extends``, ``--set``, loading
- ``failures``  the ``failures:`` section (injected faults)
- ``mapping``   YAML mappings to frozen dataclasses and back, overrides, merging

Everything a caller needs is re-exported here; code outside this package imports
from ``emulator.config``, not from its modules.
"""
from emulator.config.failures import KILL_PHASES, CorruptConfig, FailuresConfig, GlobalFaultConfig, KillConfig
from emulator.config.schema import (DEFAULT_PRESET, PRESETS_PACKAGE, CheckpointConfig, Config, DrainConfig,
                                    EmulateConfig, MetricsConfig, ModelConfig, ParallelismConfig, RunConfig,
                                    StateConfig, TierConfig, TiersConfig, TrainingConfig, from_mapping,
                                    load_config, preset_names)

__all__ = [
    "CheckpointConfig", "Config", "CorruptConfig", "DEFAULT_PRESET", "DrainConfig", "EmulateConfig",
    "FailuresConfig", "GlobalFaultConfig", "KILL_PHASES", "KillConfig", "MetricsConfig", "ModelConfig",
    "PRESETS_PACKAGE", "ParallelismConfig", "RunConfig", "StateConfig", "TierConfig", "TiersConfig",
    "TrainingConfig", "from_mapping", "load_config", "preset_names",
]
