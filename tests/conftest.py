"""Shared fixtures. Every test runs offline: models come from the embedded GGUF or local caches."""

import os

# Set before anything imports transformers or huggingface_hub, which read them at import time.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def local_model():
    """The embedded SmolLM2-135M-Instruct, loaded once per test session (CPU unless CUDA is present)."""
    from surecall.adapters.transformers.loading import shared_model

    return shared_model()


@pytest.fixture(scope="session")
def smollm2_tokenizer(local_model):
    """The embedded model's Hugging Face tokenizer."""
    return local_model.tokenizer
