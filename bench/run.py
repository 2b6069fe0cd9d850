"""Run the benchmarks: surecall beside xgrammar, llguidance, outlines-core and lm-format-enforcer.

    python bench/run.py            # full: all three tokenizers, built-in + sampled JSONSchemaBench schemas
    python bench/run.py --quick    # under two minutes: SmolLM2 tokenizer, fewer schemas, short generations

Writes ``bench/results/results.json`` (``results_quick.json`` for --quick), a markdown
report, the mask-time plot and ``README_TABLE.md``, and prints the tables.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
# Run as a script: the repository root must be importable so that `bench.*` resolves.
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

import argparse  # noqa: E402
import datetime  # noqa: E402
import importlib.metadata  # noqa: E402
import os  # noqa: E402
import platform  # noqa: E402

RESULTS_DIR = REPO_ROOT / "bench" / "results"

QUICK = {"tokenizers": "smollm2", "per_subset": 1, "compile_timeout": 2.0, "max_tokens": 32, "prompts": 2}
FULL = {"tokenizers": "smollm2,deepseek,qwen", "per_subset": 6, "compile_timeout": 10.0, "max_tokens": 96,
        "prompts": 3}
#: Picks the JSONSchemaBench schemas of a run (``--seed``).
DEFAULT_SEED = 20250301


def _versions(engine_names) -> dict[str, str]:
    from bench.peers import SURECALL_NAMES

    packages = {"xgrammar": "xgrammar", "llguidance": "llguidance", "outlines-core": "outlines_core",
                "lm-format-enforcer": "lm-format-enforcer", **dict.fromkeys(SURECALL_NAMES, "surecall")}
    versions = {}
    for name in engine_names:
        try:
            versions[name] = importlib.metadata.version(packages[name])
        except importlib.metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def _machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}"


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description="surecall benchmarks against peer engines")
    parser.add_argument("--quick", action="store_true", help="the under-two-minutes run")
    parser.add_argument("--tokenizers", help="comma list of smollm2, deepseek, qwen")
    parser.add_argument("--engines", help="comma list (default: surecall when it runs here, and all peers)")
    parser.add_argument("--builtin", help="comma list of built-in schema names (default: all)")
    parser.add_argument("--per-subset", type=int, help="JSONSchemaBench schemas sampled per subset")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--compile-timeout", type=float, help="seconds before a compile counts as an error")
    parser.add_argument("--max-tokens", type=int, help="end-to-end generation length")
    parser.add_argument("--device", default=None, help="end-to-end device: cpu or cuda")
    parser.add_argument("--skip-mask", action="store_true")
    parser.add_argument("--skip-e2e", action="store_true")
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    parser.add_argument("--suffix", help="results file suffix (default: '' full, '_quick' quick)")
    return parser.parse_args(argv)


def main(argv=None) -> dict:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    args = parse_args(argv)
    preset = QUICK if args.quick else FULL

    from bench.cases import builtin_cases, jsb_cases
    from bench.mask_bench import run_mask_bench
    from bench.peers import PEER_NAMES, SURECALL_NAMES, surecall_available
    from bench.report import e2e_table, goals, mask_table, write_reports

    if args.engines:
        engine_names = args.engines.split(",")
    else:
        engine_names = (list(SURECALL_NAMES) if surecall_available() else []) + list(PEER_NAMES)
        if "surecall" not in engine_names:
            print("[run] surecall's schema translation is not available here; peers only")
    tokenizer_names = (args.tokenizers or preset["tokenizers"]).split(",")
    per_subset = preset["per_subset"] if args.per_subset is None else args.per_subset
    compile_timeout = args.compile_timeout or preset["compile_timeout"]
    cases = builtin_cases(args.builtin.split(",") if args.builtin else None) + jsb_cases(per_subset, args.seed)
    sources = sorted({case.source for case in cases})

    results = {
        "meta": {
            "mode": "quick" if args.quick else "full",
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "machine": _machine(),
            # timings are only comparable between runs on an otherwise idle machine
            "load_average_at_start": [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None,
            "versions": _versions(engine_names),
            "seed": args.seed,
            "compile_timeout_s": compile_timeout,
            "schema_count": len(cases),
            "schema_sources": ", ".join(sources),
            "schemas": [case.id for case in cases],
        }
    }
    if not args.skip_mask:
        results["mask"] = run_mask_bench(cases, engine_names, tokenizer_names, compile_timeout=compile_timeout)
    if not args.skip_e2e:
        from bench.e2e_bench import PROMPTS, run_e2e

        results["e2e"] = run_e2e(engine_names, max_tokens=args.max_tokens or preset["max_tokens"],
                                 device=args.device, prompts=PROMPTS[: preset["prompts"]])

    suffix = args.suffix if args.suffix is not None else ("_quick" if args.quick else "")
    paths = write_reports(results, args.results_dir, suffix)
    for tokenizer, tok_result in results.get("mask", {}).items():
        print(f"\n== masks, {tokenizer} ({tok_result['vocab_size']:,} tokens)\n")
        print(mask_table(tok_result))
    if "e2e" in results:
        print("\n== end to end\n")
        print(e2e_table(results["e2e"]))
    for line in goals(results):
        print(line)
    print("\n" + "\n".join(f"{kind}: {path.relative_to(REPO_ROOT) if path.is_relative_to(REPO_ROOT) else path}"
                           for kind, path in paths.items()))
    return results


if __name__ == "__main__":
    main()
