"""Model catalogue: architectures from Hugging Face ``config.json`` files (shipped in ``configs/``, or local).

Use ``load_model("Qwen/Qwen3-32B")`` or ``load_model("/path/to/config.json")``. The shipped configs come from
aiconfigurator-core 0.12.0 (Apache-2.0; see configs/NOTICE) plus a few written from the public model cards.
"""
from simcore.models.loader import list_models, load_model, spec_from_config
from simcore.models.spec import ModelSpec, normalize_precision

__all__ = ["ModelSpec", "list_models", "load_model", "normalize_precision", "spec_from_config"]
