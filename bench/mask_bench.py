"""Mask benchmark (the MaskBench method), one engine per worker process.

For each schema, the first valid instance is serialised compactly and tokenized;
every engine is stepped through that same token path. Timed:

* time to first mask: schema text -> compiled grammar -> first full-vocabulary mask;
* per step: advance by the path's token, then the next full-vocabulary mask.

Correctness per schema: ``passing``, ``compile_error`` (``timeout`` included),
``rejected_valid`` (a token of a valid path masked out or refused, or the path
not accepted as complete) and ``accepted_invalid`` (a known-invalid instance
accepted as a complete document).

Each (engine, tokenizer) pair runs in its own worker process pinned to one core
with one thread. Workers receive one schema at a time, the engines taking turns
schema by schema (one worker running at a time), so that they meet the machine
alike; one that exceeds the compile timeout is killed, the schema is recorded as
``timeout`` and a fresh worker continues with the next schema, so no engine
carries caches between runs of the benchmark and a hung compile never stalls it.
"""

from __future__ import annotations

import gc
import json
import os
import selectors
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
if __name__ == "__main__":
    # Run as a script: import `bench.*` from the repository root.
    sys.path[0] = str(REPO_ROOT)

import numpy as np  # noqa: E402

# Touches the common keywords (strings, numbers, arrays, enum, const, format, pattern,
# bounds), so that one-off work an engine does lazily per process or per tokenizer (token
# classes of JSON strings and digits, imports of validators, ...) is done before the first
# timed schema, as the peers' tokenizer preprocessing is.
WARMUP_SCHEMA = {
    "type": "object",
    "properties": {
        "ok": {"type": "boolean"}, "n": {"type": "integer", "minimum": 0, "maximum": 99},
        "x": {"type": "number"}, "s": {"type": "string"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "kind": {"enum": ["a", "b", 1]}, "v": {"const": "k"},
        "day": {"type": "string", "format": "date"}, "code": {"type": "string", "pattern": "^[A-Z]{2}$"},
    },
}
WARMUP_INSTANCE = {"ok": True, "n": 7, "x": -1.5e3, "s": "h\u00e9llo \"w\u00f6rld\"\n", "tags": ["a b", "c"],
                   "kind": 1, "v": "k", "day": "2024-02-29", "code": "PT"}
STATUSES = ("passing", "compile_error", "rejected_valid", "accepted_invalid")
SINGLE_THREAD_ENV = {
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "RAYON_NUM_THREADS": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_VERBOSITY": "error",
}


# --------------------------------------------------------------------------- worker side


def walk(session, path: list[int], times: list[float] | None = None, on_step=None) -> tuple[bool, int]:
    """Step a session (first mask already filled) along ``path``.

    Returns (accepted as a complete document, index of the first refused token or -1).
    ``times`` receives the seconds of each advance + next mask; ``on_step(index, seconds)``,
    when given, is called after each of them, outside the timed part.
    """
    clock = time.perf_counter
    for index, token_id in enumerate(path):
        if not session.allows(token_id):
            return False, index
        start = clock()
        try:
            advanced = session.advance(token_id)
            if advanced:
                session.fill_mask()
        except Exception:  # an engine failing mid-path has refused the path, not crashed the run
            return False, index
        seconds = clock() - start
        if times is not None:
            times.append(seconds)
        if on_step is not None:
            on_step(index, seconds)
        if not advanced:
            return False, index
    try:
        return bool(session.accepting()), -1
    except Exception:
        return False, len(path)


def _emit(message: dict) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def _run_job(engine, job: dict) -> None:
    from bench.peers import CompileError

    engine.clear_caches()
    gc.collect()
    start = time.perf_counter()
    try:
        session = engine.compile(job["schema_text"])
        session.fill_mask()
    except CompileError as error:
        _emit({"event": "compiled", "error": str(error)[:500]})
        return
    ttfm = time.perf_counter() - start
    _emit({"event": "compiled", "ttfm_ms": ttfm * 1e3})

    times: list[float] = []
    accepted, refused_at = walk(session, job["valid"][0], times)
    # The same path again on a fresh session of the same compiled grammar: what a
    # second request with the same schema costs once an engine has seen the first.
    repeat_times: list[float] = []
    if accepted:
        again = session.restart()
        again.fill_mask()
        walk(again, job["valid"][0], repeat_times)
    valid_ok = accepted
    for path in job["valid"][1:]:
        other = session.restart()
        other.fill_mask()
        valid_ok = valid_ok and walk(other, path)[0]
    invalid_accepted = 0
    for path in job["invalid"]:
        other = session.restart()
        other.fill_mask()
        invalid_accepted += walk(other, path)[0]
    _emit(
        {
            "event": "done",
            "steps_us": [round(t * 1e6, 2) for t in times],
            "repeat_steps_us": [round(t * 1e6, 2) for t in repeat_times],
            "valid_accepted": valid_ok,
            "refused_at": refused_at,
            "invalid_accepted": invalid_accepted,
        }
    )


def prepared_engine(engine_name: str, tokenizer_name: str):
    """(tokenizer, engine, seconds of set-up) with the untimed warm-up schema already walked,
    so that lazy per-tokenizer set-up is not charged to the first real schema."""
    from bench.cases import compact
    from bench.peers import ENGINES
    from bench.vocabularies import load_tokenizer

    start = time.perf_counter()
    tokenizer = load_tokenizer(tokenizer_name)
    engine = ENGINES[engine_name](tokenizer)
    setup_s = time.perf_counter() - start
    warm = engine.compile(json.dumps(WARMUP_SCHEMA))
    warm.fill_mask()
    walk(warm, tokenizer.encode(compact(WARMUP_INSTANCE), add_special_tokens=False))
    return tokenizer, engine, setup_s


def worker_main(engine_name: str, tokenizer_name: str, cpu: int | None) -> None:
    if cpu is not None and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {cpu})
    try:
        import torch

        torch.set_num_threads(1)
    except ImportError:
        pass
    _, engine, setup_s = prepared_engine(engine_name, tokenizer_name)
    _emit({"event": "ready", "setup_s": setup_s})
    for line in sys.stdin:
        if line.strip():
            _run_job(engine, json.loads(line))


# --------------------------------------------------------------------------- parent side


class Worker:
    """One engine on one tokenizer in a child process, fed one schema at a time."""

    def __init__(self, engine_name: str, tokenizer_name: str, cpu: int | None, ready_timeout: float):
        self.log = tempfile.TemporaryFile(mode="w+")
        command = [sys.executable, "-m", "bench.mask_bench", "--worker", engine_name, tokenizer_name]
        if cpu is not None:
            command += ["--cpu", str(cpu)]
        env = {**os.environ, **SINGLE_THREAD_ENV, "PYTHONPATH": str(REPO_ROOT)}
        self.process = subprocess.Popen(
            command, cwd=REPO_ROOT, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=self.log, text=True,
        )
        self._pending = b""
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.process.stdout, selectors.EVENT_READ)
        ready = self.read(ready_timeout)
        if ready is None or ready.get("event") != "ready":
            message = self.failure()
            self.close()
            raise RuntimeError(f"{engine_name} on {tokenizer_name} did not start: {message}")
        self.setup_s = ready["setup_s"]

    def send(self, job: dict) -> None:
        self.process.stdin.write(json.dumps(job) + "\n")
        self.process.stdin.flush()

    def read(self, timeout: float) -> dict | None:
        """The next message, or None on timeout or when the worker died."""
        # raw reads into our own buffer: a buffered readline could swallow a second
        # message that select() would then never report
        deadline = time.monotonic() + timeout
        while True:
            newline = self._pending.find(b"\n")
            if newline >= 0:
                line, self._pending = self._pending[:newline], self._pending[newline + 1:]
                if line.startswith(b"{"):
                    return json.loads(line)
                continue
            left = deadline - time.monotonic()
            if left <= 0 or not self.selector.select(left):
                return None
            chunk = os.read(self.process.stdout.fileno(), 1 << 20)
            if not chunk:
                return None
            self._pending += chunk

    def failure(self) -> str:
        if self.process.poll() is None:
            return "no answer in time"
        self.log.seek(0)
        tail = self.log.read()[-400:].strip().splitlines()
        return f"worker exited with {self.process.returncode}: {tail[-1] if tail else ''}"

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.selector.close()
        self.log.close()


def default_cpu() -> int | None:
    if not hasattr(os, "sched_getaffinity"):
        return None
    return max(os.sched_getaffinity(0))


class EngineRun:
    """One engine's results on one tokenizer, one schema at a time (``run_job``), its worker
    started on the first schema and again after one it had to kill."""

    def __init__(self, engine_name: str, tokenizer_name: str, *, compile_timeout: float, walk_timeout: float,
                 cpu: int | None, log=print) -> None:
        self.engine_name, self.tokenizer_name = engine_name, tokenizer_name
        self.compile_timeout, self.walk_timeout, self.cpu, self.log = compile_timeout, walk_timeout, cpu, log
        self.worker: Worker | None = None
        self.setup_s: float | None = None
        self.cases: list[dict] = []

    def run_job(self, job: dict) -> dict:
        if self.worker is None:
            self.worker = Worker(self.engine_name, self.tokenizer_name, self.cpu, ready_timeout=600)
            self.setup_s = self.worker.setup_s if self.setup_s is None else self.setup_s
        worker = self.worker
        worker.send(job)
        case = {"id": job["id"], "source": job["source"], "tokens": len(job["valid"][0])}
        compiled = worker.read(self.compile_timeout)
        if compiled is None:
            reason = worker.failure()
            timed_out = worker.process.poll() is None
            case.update(status="compile_error", error="timeout" if timed_out else reason)
            self.close()
        elif "error" in compiled:
            case.update(status="compile_error", error=compiled["error"])
        else:
            case["ttfm_ms"] = round(compiled["ttfm_ms"], 4)
            done = worker.read(self.walk_timeout)
            if done is None:
                case.update(status="rejected_valid", error=f"token walk: {worker.failure()}")
                self.close()
            else:
                case["steps_us"] = done["steps_us"]
                case["repeat_steps_us"] = done["repeat_steps_us"]
                case["invalid_checked"] = len(job["invalid"])
                case["invalid_accepted"] = done["invalid_accepted"]
                if not done["valid_accepted"]:
                    case.update(status="rejected_valid", refused_at=done["refused_at"])
                elif done["invalid_accepted"]:
                    case["status"] = "accepted_invalid"
                else:
                    case["status"] = "passing"
        self.cases.append(case)
        self.log(f"  {self.engine_name:18} {self.tokenizer_name:8} {job['id'][:40]:40} {case['status']:16}"
                 f" {case.get('ttfm_ms', float('nan')):10.2f} ms {case.get('error', '')[:60]}")
        return case

    def result(self) -> dict:
        return {"setup_s": self.setup_s, "cases": self.cases}

    def close(self) -> None:
        if self.worker is not None:
            self.worker.close()
            self.worker = None


def _percentile(values, q) -> float | None:
    return round(float(np.percentile(values, q)), 3) if len(values) else None


def summarize(cases: list[dict], case_ids: set[str] | None = None) -> dict:
    """Time-to-first-mask and mask-time statistics plus the correctness counts."""
    chosen = [c for c in cases if case_ids is None or c["id"] in case_ids]
    ttfm = [c["ttfm_ms"] for c in chosen if "ttfm_ms" in c]
    steps = [t for c in chosen if c["status"] == "passing" for t in c["steps_us"]]
    repeat_steps = [t for c in chosen if c["status"] == "passing" for t in c.get("repeat_steps_us", [])]
    counts = {status: sum(c["status"] == status for c in chosen) for status in STATUSES}
    counts["timeout"] = sum(c.get("error") == "timeout" for c in chosen)
    return {
        "schemas": len(chosen),
        "correctness": counts,
        "ttfm_ms": {
            "median": _percentile(ttfm, 50),
            "mean": round(float(np.mean(ttfm)), 3) if ttfm else None,
            "p90": _percentile(ttfm, 90),
            "max": round(max(ttfm), 3) if ttfm else None,
        },
        "mask_us": {
            "steps": len(steps),
            "mean": round(float(np.mean(steps)), 3) if steps else None,
            "p50": _percentile(steps, 50),
            "p99": _percentile(steps, 99),
            "max": round(max(steps), 3) if steps else None,
        },
        "repeat_mask_us": {
            "steps": len(repeat_steps),
            "mean": round(float(np.mean(repeat_steps)), 3) if repeat_steps else None,
            "p99": _percentile(repeat_steps, 99),
        },
    }


def make_jobs(cases, tokenizer) -> list[dict]:
    from bench.cases import compact

    def path(instance):
        return tokenizer.encode(compact(instance), add_special_tokens=False)

    return [
        {
            "id": case.id,
            "source": case.source,
            "schema_text": case.schema_text,
            "valid": [path(v) for v in case.valid],
            "invalid": [path(v) for v in case.invalid],
        }
        for case in cases
        if case.valid
    ]


def run_mask_bench(cases, engine_names, tokenizer_names, *, compile_timeout=10.0, walk_timeout=120.0,
                   cpu=None, log=print) -> dict:
    """The whole mask benchmark: {tokenizer: {"vocab_size", "engines": {engine: {...}}}}.

    The engines take turns schema by schema (each in its own worker, all on one core, one
    running at a time; who goes first rotates), so that every engine's walk of a schema
    meets the machine as the others' do: a shared machine's speed drifts by a fifth within
    minutes, which running one engine through every schema after another would put into
    the ratios between them."""
    from bench.vocabularies import load_tokenizer, vocab_size

    cpu = default_cpu() if cpu is None else cpu
    results = {}
    for tokenizer_name in tokenizer_names:
        tokenizer = load_tokenizer(tokenizer_name)
        jobs = make_jobs(cases, tokenizer)
        log(f"[mask] {', '.join(engine_names)} on {tokenizer_name}: {len(jobs)} schemas, in turns")
        runs = {
            name: EngineRun(name, tokenizer_name, compile_timeout=compile_timeout, walk_timeout=walk_timeout,
                            cpu=cpu, log=log)
            for name in engine_names
        }
        failed: dict[str, str] = {}
        try:
            for index, job in enumerate(jobs):
                turn = engine_names[index % len(engine_names):] + engine_names[: index % len(engine_names)]
                for name in turn:
                    if name in failed:
                        continue
                    try:
                        runs[name].run_job(job)
                    except RuntimeError as error:
                        log(f"[mask] {error}")
                        failed[name] = str(error)
        finally:
            for run in runs.values():
                run.close()
        per_engine = {}
        for name in engine_names:
            if name in failed:
                per_engine[name] = {"error": failed[name], "cases": []}
                continue
            per_engine[name] = runs[name].result()
            per_engine[name]["summary"] = summarize(per_engine[name]["cases"])
        passing_everywhere = {
            job["id"] for job in jobs
            if all(any(c["id"] == job["id"] and c["status"] == "passing" for c in run["cases"])
                   for run in per_engine.values())
        }
        for run in per_engine.values():
            if run["cases"]:
                run["summary_common"] = summarize(run["cases"], passing_everywhere)
        results[tokenizer_name] = {
            "vocab_size": vocab_size(tokenizer),
            "common_schemas": sorted(passing_everywhere),
            "engines": per_engine,
        }
    return results


def _main() -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", nargs=2, metavar=("ENGINE", "TOKENIZER"), help=argparse.SUPPRESS)
    parser.add_argument("--cpu", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker_main(args.worker[0], args.worker[1], args.cpu)
    else:
        parser.error("run the benchmarks with `python bench/run.py`")


if __name__ == "__main__":
    _main()
