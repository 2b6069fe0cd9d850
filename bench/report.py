"""Tables, goal ratios and the mask-time plot from the benchmark results JSON."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

# Run as a script (``python bench/report.py``): the repository root must be importable.
if str(Path(__file__).resolve().parent.parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.peers import SURECALL_NAMES  # noqa: E402

ENGINE_ORDER = SURECALL_NAMES + ("xgrammar", "llguidance", "outlines-core", "lm-format-enforcer")


def _ordered(engines: dict) -> list[str]:
    return [name for name in ENGINE_ORDER if name in engines] + sorted(set(engines) - set(ENGINE_ORDER))


def _num(value, digits=1) -> str:
    if value is None:
        return "-"
    if value >= 1000:
        return f"{value:,.0f}"
    return f"{value:.{digits}f}"


def mask_table(tokenizer_result: dict) -> str:
    """One markdown table: correctness and timings per engine, for one tokenizer."""
    header = (
        "| engine | passing | compile error (timeout) | rejected valid | accepted invalid "
        "| first mask median (ms) | first mask max (ms) | mask mean (us) | p50 | p99 | max "
        "| mean on common schemas (us) | mean, same grammar again (us) |\n"
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n"
    )
    rows = []
    engines = tokenizer_result["engines"]
    for name in _ordered(engines):
        run = engines[name]
        if "summary" not in run:
            rows.append(f"| {name} | did not start: {run.get('error', '')[:80]} |" + " |" * 11)
            continue
        s, common = run["summary"], run.get("summary_common", {})
        c = s["correctness"]
        rows.append(
            f"| {name} | {c['passing']}/{s['schemas']} | {c['compile_error']} ({c['timeout']}) "
            f"| {c['rejected_valid']} | {c['accepted_invalid']} "
            f"| {_num(s['ttfm_ms']['median'], 2)} | {_num(s['ttfm_ms']['max'], 0)} "
            f"| {_num(s['mask_us']['mean'])} | {_num(s['mask_us']['p50'])} | {_num(s['mask_us']['p99'])} "
            f"| {_num(s['mask_us']['max'], 0)} | {_num(common.get('mask_us', {}).get('mean'))} "
            f"| {_num(s.get('repeat_mask_us', {}).get('mean'))} |"
        )
    return header + "\n".join(rows) + "\n"


def e2e_table(e2e: dict) -> str:
    entries = e2e["entries"]
    base = {e["engine"]: e["tokens_per_s"] for e in entries}
    header = ("| run | tokens/s | vs unconstrained generate | valid JSON | compile errors |\n"
              "|---|---:|---:|---:|---:|\n")
    rows = []
    for e in entries:
        ratio = (e["tokens_per_s"] / base["unconstrained"]) if e["tokens_per_s"] and base.get("unconstrained") else None
        rows.append(f"| {e['engine']} | {_num(e['tokens_per_s'])} | {('%.2fx' % ratio) if ratio else '-'} "
                    f"| {e['valid_outputs']}/{len(e['runs'])} | {e.get('compile_errors', 0)} |")
    return header + "\n".join(rows) + "\n"


def _ratio(a, b) -> float | None:
    return a / b if a is not None and b not in (None, 0) else None


def goals(results: dict) -> list[str]:
    """The issue's targets, checked per tokenizer from one run (surecall against the peers)."""
    lines = []
    for tokenizer, tok_result in results.get("mask", {}).items():
        engines = {n: r for n, r in tok_result["engines"].items() if "summary" in r}
        if "surecall" not in engines:
            lines.append(f"- {tokenizer}: surecall was not part of this run.")
            continue
        ours = engines["surecall"]["summary"]
        peers = {n: r["summary"] for n, r in engines.items() if n not in SURECALL_NAMES}
        if not peers:
            continue
        best_mean_name = min((n for n in peers if peers[n]["mask_us"]["mean"] is not None),
                             key=lambda n: peers[n]["mask_us"]["mean"], default=None)
        mean_ratio = _ratio(ours["mask_us"]["mean"], peers[best_mean_name]["mask_us"]["mean"]) if best_mean_name else None
        p99_ratio = _ratio(ours["mask_us"]["p99"], peers.get("llguidance", {}).get("mask_us", {}).get("p99"))
        ttfm = ours["ttfm_ms"]["median"]
        ttfm_parts = []
        for peer in ("xgrammar", "outlines-core", "llguidance"):
            ratio = _ratio(ttfm, peers.get(peer, {}).get("ttfm_ms", {}).get("median"))
            if ratio is not None:
                ttfm_parts.append(f"{ratio:.2f}x {peer}")
        fewest_errors = min(p["correctness"]["compile_error"] for p in peers.values())
        c = ours["correctness"]
        parts = []
        if mean_ratio is not None:
            parts.append(f"mask mean {mean_ratio:.2f}x the best peer's ({best_mean_name})")
        if p99_ratio is not None:
            parts.append(f"p99 {p99_ratio:.2f}x llguidance's")
        if ttfm_parts:
            parts.append(f"first-mask median {', '.join(ttfm_parts)}")
        parts.append(f"compile errors {c['compile_error']} (fewest among peers: {fewest_errors}), "
                     f"rejected valid {c['rejected_valid']}, accepted invalid {c['accepted_invalid']}")
        lines.append(f"- {tokenizer}: " + "; ".join(parts) + ".")
        against_llguidance = _common_means_against(engines, "llguidance", len(tok_result.get("common_schemas", [])))
        if against_llguidance:
            lines.append(f"- {tokenizer}: {against_llguidance}.")
    e2e = results.get("e2e")
    if e2e:
        tps = {e["engine"]: e["tokens_per_s"] for e in e2e["entries"]}
        for ours, base in (("surecall (decode)", "unconstrained"), ("surecall (decode)", "unconstrained (decode)"),
                           ("surecall (processor)", "unconstrained")):
            ratio = _ratio(tps.get(ours), tps.get(base))
            if ratio is not None:
                lines.append(f"- end-to-end: {ours} runs at {ratio:.2f}x the tokens/s of {base}.")
    return lines


def _common_means_against(engines: dict, peer: str, common: int) -> str:
    """Each surecall variant's mean on the schemas every engine passes, against ``peer``'s
    there (the same schemas, the same paths); empty without the peer."""
    def common_mean(name):
        return engines.get(name, {}).get("summary_common", {}).get("mask_us", {}).get("mean")

    base = common_mean(peer)
    if not base:
        return ""
    parts = [f"{name} {mean:.1f} us ({_ratio(mean, base):.2f}x)"
             for name in SURECALL_NAMES if (mean := common_mean(name)) is not None]
    if not parts:
        return ""
    return f"mean on the {common} schemas every engine passes: {peer} {base:.1f} us, " + ", ".join(parts)


def markdown_report(results: dict) -> str:
    meta = results["meta"]
    parts = [
        f"# surecall benchmark ({meta['mode']} run, {meta['date']})\n",
        f"Machine: {meta['machine']}"
        + (f" (load average at start: {meta['load_average_at_start'][0]})" if meta.get("load_average_at_start") else "")
        + f". Engines: {', '.join(f'{k} {v}' for k, v in meta['versions'].items())}.\n",
        f"Schemas: {meta['schema_count']} ({meta['schema_sources']}), seed {meta['seed']}, "
        f"compile timeout {meta['compile_timeout_s']} s. One process per engine, one core, the engines taking "
        "turns schema by schema, compact JSON.\n",
    ]
    for tokenizer, tok_result in results.get("mask", {}).items():
        parts.append(f"\n## Masks, {tokenizer} tokenizer ({tok_result['vocab_size']:,} tokens)\n\n")
        parts.append(mask_table(tok_result))
        parts.append(f"\nCommon schemas (every engine passing): {len(tok_result['common_schemas'])}.\n")
    if results.get("e2e"):
        e2e = results["e2e"]
        parts.append(f"\n## End to end, {e2e['model']} on {e2e['device']}, greedy, "
                     f"max {e2e['max_tokens']} tokens\n\n")
        parts.append(e2e_table(e2e))
    goal_lines = goals(results)
    if goal_lines:
        parts.append("\n## Goals\n\n" + "\n".join(goal_lines) + "\n")
    return "".join(parts)


def readme_snippet(results: dict) -> str:
    """The README's benchmark section: first tokenizer's table, e2e table, how to regenerate."""
    meta = results["meta"]
    parts = [
        f"Measured with `make {'bench-quick' if meta['mode'] == 'quick' else 'bench'}` on {meta['machine']} "
        f"({meta['date']}): "
        f"{meta['schema_count']} schemas ({meta['schema_sources']}), every engine stepped through the "
        "same compact-JSON token path, one process per engine on one core, the engines taking turns schema "
        "by schema. "
        "First mask = schema text to the first full-vocabulary mask; mask = one advance plus the next "
        "full-vocabulary mask.\n",
    ]
    for tokenizer, tok_result in results.get("mask", {}).items():
        parts.append(f"\n**{tokenizer} tokenizer ({tok_result['vocab_size']:,} tokens)**\n\n")
        parts.append(mask_table(tok_result))
    if results.get("e2e"):
        e2e = results["e2e"]
        parts.append(f"\n**End to end** ({e2e['model']}, {e2e['device']}, greedy, max {e2e['max_tokens']} tokens)\n\n")
        parts.append(e2e_table(e2e))
    parts.append("\n![mask time distributions](bench/results/mask_times.png)\n")
    return "".join(parts)


def plot(results: dict, path: Path) -> None:
    """Box plots (log scale) of per-step mask time and of time to first mask, per engine and tokenizer."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    mask = results.get("mask", {})
    if not mask:
        return
    figure, axes = plt.subplots(2, len(mask), figsize=(5.5 * len(mask), 8), squeeze=False)
    for column, (tokenizer, tok_result) in enumerate(mask.items()):
        engines = tok_result["engines"]
        names = [n for n in _ordered(engines) if engines[n].get("cases")]
        steps = [[t for c in engines[n]["cases"] if c["status"] == "passing" for t in c["steps_us"]] or [np.nan]
                 for n in names]
        ttfm = [[c["ttfm_ms"] for c in engines[n]["cases"] if "ttfm_ms" in c] or [np.nan] for n in names]
        for row, (data, label) in enumerate(((steps, "mask + advance (us)"), (ttfm, "time to first mask (ms)"))):
            axis = axes[row][column]
            axis.boxplot(data, whis=(1, 99), showfliers=True, flierprops={"markersize": 2, "alpha": 0.4})
            axis.set_xticks(range(1, len(names) + 1), names, rotation=25, ha="right", fontsize=8)
            axis.set_yscale("log")
            axis.set_ylabel(label)
            axis.grid(axis="y", alpha=0.3)
            axis.set_title(f"{tokenizer} ({tok_result['vocab_size']:,} tokens)", fontsize=10)
    figure.suptitle("Per-step mask time and time to first mask (whiskers: p1-p99)")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def write_reports(results: dict, results_dir: Path, suffix: str = "") -> dict[str, Path]:
    results_dir.mkdir(parents=True, exist_ok=True)
    paths = {
        "json": results_dir / f"results{suffix}.json",
        "markdown": results_dir / f"results{suffix}.md",
        "plot": results_dir / f"mask_times{suffix}.png",
        "readme": results_dir / f"README_TABLE{suffix}.md",
    }
    paths["json"].write_text(json.dumps(results, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    paths["markdown"].write_text(markdown_report(results), encoding="utf-8")
    paths["readme"].write_text(readme_snippet(results).replace("mask_times.png", paths["plot"].name),
                               encoding="utf-8")
    plot(results, paths["plot"])
    return paths


def _main() -> None:
    import argparse

    parser = argparse.ArgumentParser(description="Regenerate tables and plot from a results JSON.")
    parser.add_argument("results", type=Path)
    args = parser.parse_args()
    results = json.loads(args.results.read_text(encoding="utf-8"))
    stem = args.results.stem
    suffix = stem[len("results"):] if stem.startswith("results") else ""
    for kind, path in write_reports(results, args.results.parent, suffix).items():
        print(f"{kind}: {path}")


if __name__ == "__main__":
    _main()
