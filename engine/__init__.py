"""surecall.engine: grammars, byte-level automata, the vocabulary index and the matcher.

Pure Python + numpy; no torch, pydantic, langchain or transformers imports.
"""

from importlib import import_module

_EXPORTS = {
    "Grammar": "grammar",
    "CheckedGrammar": "grammar",
    "GrammarError": "errors",
    "EmptyLanguageError": "errors",
    "UnsupportedRegexError": "errors",
    "TokenBudgetError": "errors",
    "TokenVocabulary": "vocab",
    "Matcher": "matcher",
    "Status": "matcher",
    "AlignedSampler": "aligned",
    "IncrementalParser": "constraints",
    "ParseFailure": "constraints",
    "OneOf": "constraints",
    "ConstraintMatcher": "constraints",
    "ir": None,
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'surecall.engine' has no attribute {name!r}")
    module_name = _EXPORTS[name]
    if module_name is None:
        return import_module(f"{__name__}.{name}")
    value = getattr(import_module(f"{__name__}.{module_name}"), name)
    globals()[name] = value
    return value
