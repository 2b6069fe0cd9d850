"""Quickstart: structured extraction with the embedded SmolLM2-135M-Instruct.

Run with ``make demo``. A Pydantic model goes in, a validated instance comes out: the model
can only produce JSON that matches the schema. The first run converts the embedded GGUF file
into a regular checkpoint under ``~/.cache/surecall`` (about half a minute); later runs load it
in seconds. The example itself lives in ``cookbook/extract_pydantic.py``.
"""

import sys
import time

import surecall
from extract_pydantic import SIGNATURE, main as extract_contact


def main() -> int:
    print("Loading the embedded model (the first run converts it once)...", flush=True)
    started = time.perf_counter()
    try:
        local_model = surecall.load_model()
    except surecall.ModelLoadError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(f"Loaded {local_model!r} in {time.perf_counter() - started:.1f} s\n")
    print(f"Extracting a contact from:\n{SIGNATURE}\n")
    started = time.perf_counter()
    extract_contact(local_model)
    print(f"\n(generated and validated in {time.perf_counter() - started:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
