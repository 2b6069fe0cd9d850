"""Finite token budgets: plain masking truncates, budget-aware masking finishes.

Mündler (2024), "Proper well-formedness for finite LLM sampling": a grammar mask
alone does not make output valid when generation stops after ``max_tokens``; the
output is cut off mid-JSON. surecall's matcher knows, for every state, the fewest
tokens that still reach a complete sentence, and with ``max_tokens`` masks every
token after which no completion fits any more.

On the embedded model, greedy decoding, for every prompt and every budget of
``minimum completion length + slack`` tokens:

* plain masking: ``Matcher(grammar, vocab)`` (mask only), generation stops at the budget;
* budget-aware masking: ``Matcher(grammar, vocab, max_tokens=budget)``.

An output counts as valid when it parses and validates against its schema.
Run: ``python -m bench.budget_demo`` (writes ``bench/results/budget.json`` and
``bench/results/budget.md``).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

RESULTS_DIR = Path(__file__).resolve().parent / "results"

PERSON_SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}, "city": {"type": "string"}},
    "required": ["name", "age", "city"],
    "additionalProperties": False,
}
PRODUCT_SCHEMA = {
    "type": "object",
    "properties": {
        "product": {"type": "string"},
        "price": {"type": "number"},
        "tags": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["product", "price", "tags"],
    "additionalProperties": False,
}

PEOPLE = [
    ("Maria Fernanda Oliveira", 34, "Rio de Janeiro"), ("Kenji Watanabe", 52, "Osaka"),
    ("Aleksandra Kowalczyk", 27, "Wroclaw"), ("Oluwaseun Adebayo", 41, "Lagos"),
    ("Siobhan O'Connell", 63, "Galway"), ("Rahul Venkataraman", 29, "Bangalore"),
    ("Ingrid Johansson", 45, "Gothenburg"), ("Mateo Alejandro Ruiz", 38, "Buenos Aires"),
    ("Chloe Dubois-Lefevre", 22, "Marseille"), ("Nguyen Thi Minh Anh", 31, "Ho Chi Minh City"),
    ("Dmitri Volkov", 57, "Saint Petersburg"), ("Fatima Zahra Benali", 36, "Casablanca"),
    ("Hannah Schmidt", 48, "Frankfurt am Main"), ("Tomasz Wisniewski", 33, "Krakow"),
    ("Isabella Rossi", 26, "Florence"), ("Ahmed Hassan Mahmoud", 60, "Alexandria"),
    ("Sakura Yamamoto", 19, "Sapporo"), ("William Thompson", 71, "Edinburgh"),
    ("Lucia Martinez Garcia", 44, "Valencia"), ("Jonas Petersen", 39, "Copenhagen"),
    ("Amara Nwosu", 24, "Abuja"), ("Elena Popescu", 53, "Bucharest"),
    ("Carlos Eduardo Santos", 47, "Sao Paulo"), ("Priya Raghunathan", 35, "Chennai"),
    ("Liam Gallagher-Byrne", 28, "Dublin"), ("Zhang Wei", 42, "Chengdu"),
    ("Astrid Lindqvist", 66, "Uppsala"), ("Mehmet Yilmaz", 37, "Izmir"),
    ("Sofia Papadopoulou", 30, "Thessaloniki"), ("Jean-Baptiste Moreau", 58, "Bordeaux"),
]
PRODUCTS = [
    ("wireless noise-cancelling headphones", 249.99, ["audio", "bluetooth"]),
    ("stainless steel water bottle", 24.5, ["outdoor", "kitchen"]),
    ("ergonomic office chair", 389.0, ["furniture", "office"]),
    ("mechanical keyboard with brown switches", 129.95, ["computer", "gaming"]),
    ("organic green tea, 100 bags", 12.75, ["food", "organic"]),
    ("4K ultra HD television, 55 inch", 699.0, ["electronics", "home"]),
    ("trail running shoes", 139.99, ["sports", "footwear"]),
    ("cast iron skillet", 45.0, ["kitchen", "cookware"]),
    ("smart fitness watch", 199.0, ["wearable", "fitness"]),
    ("children's picture book about dinosaurs", 15.99, ["books", "kids"]),
    ("portable solar charger", 59.9, ["outdoor", "electronics"]),
    ("espresso machine", 549.0, ["kitchen", "coffee"]),
    ("yoga mat, extra thick", 34.99, ["fitness", "yoga"]),
    ("LED desk lamp with USB port", 39.5, ["office", "lighting"]),
    ("waterproof hiking backpack", 89.0, ["outdoor", "travel"]),
    ("electric toothbrush", 79.99, ["health", "bathroom"]),
    ("acoustic guitar starter pack", 179.0, ["music", "instruments"]),
    ("robot vacuum cleaner", 299.99, ["home", "cleaning"]),
    ("bamboo cutting board set", 29.95, ["kitchen", "eco"]),
    ("noise machine for sleep", 49.0, ["health", "sleep"]),
    ("leather wallet", 65.0, ["accessories", "fashion"]),
    ("gaming mouse", 59.99, ["computer", "gaming"]),
    ("ceramic plant pot", 18.0, ["garden", "home"]),
    ("travel pillow", 25.0, ["travel", "comfort"]),
    ("digital kitchen scale", 22.49, ["kitchen", "baking"]),
    ("winter down jacket", 229.0, ["clothing", "winter"]),
    ("board game for families", 39.99, ["games", "family"]),
    ("wireless phone charger", 29.99, ["electronics", "phone"]),
]
SLACKS = (0, 4, 8, 16)


def cases() -> list[dict]:
    """At least 50 prompts: people and products to extract as JSON."""
    result = []
    for name, age, city in PEOPLE:
        text = f"{name} is {age} years old and lives in {city}."
        result.append({
            "schema": "person",
            "prompt": [{"role": "user", "content": f"Return the person as JSON with name, age and city. {text}"}],
        })
    for product, price, tags in PRODUCTS:
        text = f"The {product} costs ${price} and is listed under {' and '.join(tags)}."
        result.append({
            "schema": "product",
            "prompt": [{"role": "user", "content": f"Return the product as JSON with product, price and tags. {text}"}],
        })
    return result


SCHEMAS = {"person": PERSON_SCHEMA, "product": PRODUCT_SCHEMA}


def run(local_model, case_list: list[dict], slacks=SLACKS) -> tuple[list[dict], dict[str, float]]:
    """Decode every case at every slack with both maskings: one row per (case, slack),
    and the wall-clock seconds of the batched decode."""
    from surecall.adapters.transformers.decode import decode_batch
    from surecall.engine import Matcher
    from surecall.generation import render_prompt
    from surecall.output_types import OutputSpec

    vocab = local_model.vocabulary
    specs = {name: OutputSpec.of(schema) for name, schema in SCHEMAS.items()}
    minimum = {name: Matcher(spec.grammar, vocab).min_tokens_to_finish() for name, spec in specs.items()}
    rows, prompts, seconds = [], [], {}
    for index, case in enumerate(case_list):
        prompt_ids = render_prompt(local_model.tokenizer, case["prompt"])
        for slack in slacks:
            budget = minimum[case["schema"]] + slack
            rows.append({"case": index, "schema": case["schema"], "slack": slack, "budget": budget})
            prompts.append(prompt_ids)
    budgets = [row["budget"] for row in rows]
    constraints = {
        # plain masking: the grammar's mask only, generation simply stops at the budget
        "plain": [Matcher(specs[row["schema"]].grammar, vocab) for row in rows],
        # budget-aware: decode builds Matcher(grammar, vocab, max_tokens=budget)
        "budget_aware": [specs[row["schema"]].grammar for row in rows],
    }
    # both maskings in one batch: every row is independent, and one forward pass per step serves all
    started = time.perf_counter()
    results = decode_batch(
        local_model, prompts * 2, constraints["plain"] + constraints["budget_aware"], max_tokens=budgets * 2
    )
    seconds["decode"] = time.perf_counter() - started
    for offset, mode in ((0, "plain"), (len(rows), "budget_aware")):
        for index, row in enumerate(rows):
            row[mode] = _outcome(specs[row["schema"]], results[offset + index])
    return rows, seconds


def _outcome(spec, result) -> dict:
    try:
        spec.parse(result.text)
        valid = True
    except Exception:  # any parse or validation failure counts as an invalid output
        valid = False
    return {
        "text": result.text,
        "tokens": result.completion_tokens,
        "finish_reason": result.finish_reason,
        "valid": valid,
    }


def summarise(rows: list[dict]) -> list[dict]:
    table = []
    for slack in sorted({row["slack"] for row in rows}):
        selected = [row for row in rows if row["slack"] == slack]
        line = {"slack": slack, "outputs": len(selected)}
        for mode in ("plain", "budget_aware"):
            outcomes = [row[mode] for row in selected]
            line[mode] = {
                "valid": sum(o["valid"] for o in outcomes),
                "truncated": sum(o["finish_reason"] == "length" and not o["valid"] for o in outcomes),
                "mean_tokens": sum(o["tokens"] for o in outcomes) / len(outcomes),
            }
        table.append(line)
    return table


def markdown(table: list[dict], minimum: dict[str, int]) -> str:
    lines = [
        f"Minimum completion length: {', '.join(f'{k} {v} tokens' for k, v in minimum.items())}. "
        "Budget = minimum + slack; greedy decoding on SmolLM2-135M-Instruct.",
        "",
        "| budget | outputs | plain masking: valid | plain masking: truncated | budget-aware: valid | budget-aware: truncated |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for line in table:
        n = line["outputs"]
        plain, aware = line["plain"], line["budget_aware"]
        lines.append(
            f"| minimum + {line['slack']} | {n} | {plain['valid']} ({plain['valid'] / n:.0%}) | "
            f"{plain['truncated']} ({plain['truncated'] / n:.0%}) | {aware['valid']} ({aware['valid'] / n:.0%}) | "
            f"{aware['truncated']} ({aware['truncated'] / n:.0%}) |"
        )
    return "\n".join(lines) + "\n"


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=None, help="use only the first N prompts")
    args = parser.parse_args(argv)
    from surecall.adapters.transformers.loading import load_model
    from surecall.engine import Matcher
    from surecall.output_types import OutputSpec

    local_model = load_model()
    case_list = cases()[: args.limit]
    rows, seconds = run(local_model, case_list)
    minimum = {
        name: Matcher(OutputSpec.of(schema).grammar, local_model.vocabulary).min_tokens_to_finish()
        for name, schema in SCHEMAS.items()
    }
    table = summarise(rows)
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    report = {"minimum_tokens": minimum, "table": table, "seconds": seconds, "rows": rows}
    (RESULTS_DIR / "budget.json").write_text(json.dumps(report, indent=2))
    (RESULTS_DIR / "budget.md").write_text(markdown(table, minimum))
    print(markdown(table, minimum))
    return report


if __name__ == "__main__":
    main()
