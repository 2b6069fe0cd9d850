"""surecall: guaranteed-valid structured output and tool calls from local language models.

Public names are resolved lazily so that ``import surecall`` stays cheap and does not
import torch or transformers until a model is actually used.
"""

from importlib import import_module

__version__ = "0.1.0"

_EXPORTS = {
    # engine
    "Grammar": "surecall.engine.grammar",
    "GrammarError": "surecall.engine.errors",
    "TokenBudgetError": "surecall.engine.errors",
    "TokenVocabulary": "surecall.engine.vocab",
    "Matcher": "surecall.engine.matcher",
    "Status": "surecall.engine.matcher",
    "AlignedSampler": "surecall.engine.aligned",
    # schema translation and validation
    "grammar_from_schema": "surecall.schema",
    "to_json_schema": "surecall.schema",
    "UnsupportedSchemaError": "surecall.schema",
    "OutputValidationError": "surecall.validation",
    # output types and generation
    "Regex": "surecall.output_types",
    "output_type": "surecall.output_types",
    "generate": "surecall.generation",
    "stream": "surecall.generation",
    "generate_batch": "surecall.generation",
    "generate_result": "surecall.generation",
    "generate_batch_results": "surecall.generation",
    "GenerationResult": "surecall.generation",
    "ToolSpec": "surecall.tools",
    "tool_spec": "surecall.tools",
    "sample_aligned": "surecall.sampling",
    # models
    "load_model": "surecall.adapters.transformers.loading",
    "LocalModel": "surecall.adapters.transformers.loading",
    "ModelLoadError": "surecall.adapters.transformers.loading",
}

__all__ = sorted(_EXPORTS) + ["__version__"]


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'surecall' has no attribute {name!r}")
    value = getattr(import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value


def __dir__():
    return __all__
