"""A very small run of the benchmark harness, checked against the engines themselves."""

from __future__ import annotations

import json
import os
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("xgrammar")
pytest.importorskip("llguidance")

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bench.cases import builtin_cases, compact  # noqa: E402
from bench.mask_bench import EngineRun, make_jobs, run_mask_bench, walk  # noqa: E402
from bench.peers import ENGINES, PEER_NAMES, SURECALL_NAMES, surecall_available  # noqa: E402
from bench.report import write_reports  # noqa: E402
from bench.vocabularies import encode, load_tokenizer, token_bytes_table, vocab_size  # noqa: E402

SCHEMAS = ["get_weather", "tool_call_choice"]


@pytest.fixture(scope="module")
def smollm2():
    return load_tokenizer("smollm2")


@pytest.fixture(scope="module")
def engine_names():
    return (list(SURECALL_NAMES) if surecall_available() else []) + list(PEER_NAMES)


@pytest.fixture(scope="module")
def small_run_log(engine_names):
    cases = builtin_cases(SCHEMAS)
    lines: list[str] = []
    return cases, run_mask_bench(cases, engine_names, ["smollm2"], compile_timeout=120.0, log=lines.append), lines


@pytest.fixture(scope="module")
def small_run(small_run_log):
    cases, results, _ = small_run_log
    return cases, results


def test_engines_take_turns_schema_by_schema(small_run_log, engine_names):
    # Every engine walks a schema before any walks the next, the first turn rotating: a
    # drift in the machine's speed meets them alike.
    _, _, lines = small_run_log
    order = [(line.split()[2], line.split()[0]) for line in lines if not line.startswith("[")]
    assert [schema for schema, _ in order] == [schema for schema in SCHEMAS for _ in engine_names]
    firsts = [order[index * len(engine_names)][1] for index in range(len(SCHEMAS))]
    assert firsts == [engine_names[index % len(engine_names)] for index in range(len(SCHEMAS))]


def test_every_passing_engine_really_accepts_the_whole_path(small_run, smollm2):
    cases, results = small_run
    engines = results["smollm2"]["engines"]
    checked = 0
    for engine_name, run in engines.items():
        assert "error" not in run, f"{engine_name} did not start: {run.get('error')}"
        engine = ENGINES[engine_name](smollm2)
        for case_result in run["cases"]:
            if case_result["status"] != "passing":
                continue
            case = next(c for c in cases if c.id == case_result["id"])
            path = encode(smollm2, compact(case.valid[0]))
            assert case_result["tokens"] == len(path)
            assert len(case_result["steps_us"]) == len(path)
            # the second walk, on a fresh session of the same grammar, covers the whole path too
            assert len(case_result["repeat_steps_us"]) == len(path)
            session = engine.compile(case.schema_text)
            session.fill_mask()
            for token_id in path:
                assert session.allows(token_id), (engine_name, case.id, token_id)
                assert session.advance(token_id), (engine_name, case.id, token_id)
                session.fill_mask()
            assert session.accepting(), (engine_name, case.id)
            checked += 1
    # xgrammar and llguidance handle both schemas; if they stop passing, the harness is broken
    assert checked >= 2 * len(SCHEMAS)


def test_results_json_has_the_expected_fields(small_run, tmp_path):
    cases, mask = small_run
    results = {
        "meta": {"mode": "test", "date": "now", "machine": "here", "versions": {}, "seed": 0,
                 "compile_timeout_s": 120.0, "schema_count": len(cases), "schema_sources": "builtin",
                 "schemas": [c.id for c in cases]},
        "mask": mask,
    }
    paths = write_reports(results, tmp_path, "_test")
    data = json.loads(paths["json"].read_text(encoding="utf-8"))
    tokenizer_result = data["mask"]["smollm2"]
    assert tokenizer_result["vocab_size"] == 49152
    for engine_name, run in tokenizer_result["engines"].items():
        summary = run["summary"]
        assert set(summary["correctness"]) == {"passing", "compile_error", "rejected_valid",
                                               "accepted_invalid", "timeout"}
        assert sum(summary["correctness"][k] for k in ("passing", "compile_error", "rejected_valid",
                                                        "accepted_invalid")) == len(SCHEMAS)
        assert set(summary["ttfm_ms"]) == {"median", "mean", "p90", "max"}
        assert set(summary["mask_us"]) == {"steps", "mean", "p50", "p99", "max"}
        assert set(summary["repeat_mask_us"]) == {"steps", "mean", "p99"}
        assert summary["repeat_mask_us"]["steps"] == summary["mask_us"]["steps"]
        assert {c["id"] for c in run["cases"]} == set(SCHEMAS)
        for case_result in run["cases"]:
            assert case_result["status"] in {"passing", "compile_error", "rejected_valid", "accepted_invalid"}
            if case_result["status"] != "compile_error":
                assert case_result["ttfm_ms"] > 0
    assert "| engine |" in paths["markdown"].read_text(encoding="utf-8")
    assert paths["plot"].stat().st_size > 0
    assert "first mask" in paths["readme"].read_text(encoding="utf-8").lower()


def test_a_path_outside_the_schema_is_reported_as_rejected(smollm2):
    case = builtin_cases(["get_weather"])[0]
    job = make_jobs([case], smollm2)[0]
    # present an invalid instance as if it were the valid one: the harness must not call it passing
    job["valid"] = [encode(smollm2, compact({"location": "Paris", "unit": "kelvin"}))]
    for engine_name in ("xgrammar", "llguidance"):
        run = EngineRun(engine_name, "smollm2", compile_timeout=120.0, walk_timeout=120.0, cpu=None,
                        log=lambda _: None)
        try:
            case_result = run.run_job(job)
        finally:
            run.close()
        assert run.result()["cases"] == [case_result]
        assert case_result["status"] == "rejected_valid"
        assert case_result["refused_at"] >= 0
        assert case_result["repeat_steps_us"] == []


def test_walk_stops_at_the_first_refused_token(smollm2):
    engine = ENGINES["llguidance"](smollm2)
    session = engine.compile(json.dumps({"type": "object", "properties": {"n": {"type": "integer"}},
                                         "required": ["n"], "additionalProperties": False}))
    session.fill_mask()
    good = encode(smollm2, '{"n":')
    path = good + encode(smollm2, '"x"}')
    accepted, refused_at = walk(session, path)
    assert not accepted
    assert refused_at == len(good)


def test_surecall_compiles_the_peers_property_order_and_the_any_order_variant_every_order(smollm2):
    # The benchmark's surecall row compares like with like: an object's listed properties in
    # the schema's order, which xgrammar and llguidance compile too; the any-order row
    # accepts the order JSON Schema leaves free.
    schema = json.dumps({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                         "required": ["a", "b"], "additionalProperties": False})
    in_order = encode(smollm2, '{"a":1,"b":2}')
    reordered = encode(smollm2, '{"b":2,"a":1}')

    engines = {name: ENGINES[name](smollm2)
               for name in ("surecall", "surecall-budget", "surecall-any-order", "xgrammar", "llguidance")}

    def accepts(engine_name, path):
        session = engines[engine_name].compile(schema)
        session.fill_mask()
        accepted, _ = walk(session, path)
        return accepted

    for engine_name in engines:
        assert accepts(engine_name, in_order), engine_name
    assert [accepts(name, reordered) for name in ("surecall", "surecall-budget", "xgrammar", "llguidance")] == [
        False
    ] * 4
    assert accepts("surecall-any-order", reordered)


# SmolLM2's vocabulary has no token for a few control bytes and for the UTF-8 lead bytes of
# code points above U+3FFFF, so its text is drawn from below that range without controls.
@settings(max_examples=40, deadline=None)
@given(st.text(alphabet=st.characters(max_codepoint=0x1FFFF, blacklist_categories=("Cs", "Cc")), max_size=40))
def test_token_bytes_spell_the_encoded_text(smollm2, text):
    table = token_bytes_table(smollm2)
    ids = encode(smollm2, text)
    assert b"".join(table[i] for i in ids) == text.encode("utf-8")


@pytest.mark.parametrize("name", ["deepseek", "qwen"])
def test_large_tokenizers_load_with_their_published_sizes(name):
    tokenizer = load_tokenizer(name)
    assert vocab_size(tokenizer) == {"deepseek": 129280, "qwen": 151851}[name]
    table = token_bytes_table(tokenizer)
    text = '{"città":"Zürich","emoji":"\U0001F600\U00040000","n":[1,2.5e-3]}'
    ids = encode(tokenizer, text)
    assert b"".join(table[i] for i in ids) == text.encode("utf-8")
    assert table[tokenizer.eos_token_id] is None


def test_step_profile_takes_apart_the_steps_of_the_benchmark_walk(smollm2):
    from bench.mask_bench import make_jobs, walk
    from bench.step_profile import PHASES, _resolve, profile_steps, report, timed_phases
    from surecall.engine.matcher import Matcher, MatcherBase

    cases = builtin_cases(SCHEMAS)
    jobs = make_jobs(cases, smollm2)
    engine = ENGINES["surecall"](smollm2)
    originals = {}
    for module, path, label in PHASES:
        found = _resolve(module, path)
        if found is not None:
            originals[label] = vars(found[0]).get(found[1])
    profile = profile_steps(engine, smollm2, jobs)

    # every step of every accepted path, in order, with the states each one built
    assert profile.passing == [case.id for case in cases]
    assert len(profile.steps) == sum(len(job["valid"][0]) for job in jobs)
    for job in jobs:
        steps = [step for step in profile.steps if step.schema == job["id"]]
        assert [step.index for step in steps] == list(range(len(job["valid"][0])))
        assert "".join(step.token for step in steps) == smollm2.decode(job["valid"][0])
    assert all(step.new_states is not None and step.new_states >= 0 for step in profile.steps)
    # a cold grammar builds states while it is walked: the first walk is the one measured
    assert sum(step.new_states for step in profile.steps) > 0
    # the same count as a plain walk of a fresh compile sees
    job = jobs[0]
    engine.clear_caches()
    session = engine.compile(job["schema_text"])
    session.fill_mask()
    start = session.parse_states()
    assert walk(session, job["valid"][0])[0]
    first = [step for step in profile.steps if step.schema == job["id"]]
    assert sum(step.new_states for step in first) == session.parse_states() - start

    # phases are timed inside the steps only, so none exceeds their total
    assert profile.phases and set(profile.phases) <= {label for _, _, label in PHASES}
    assert all(0 < seconds <= profile.total_seconds for seconds in profile.phases.values())
    # and the engine's functions are its own again afterwards (an inherited one inherited again)
    for module, path, label in PHASES:
        if label in originals:
            owner, name = _resolve(module, path)
            assert vars(owner).get(name) is originals[label], label
    with timed_phases((("surecall.engine.matcher", "Matcher.fill_bitmask", "masks into a buffer"),)):
        assert "fill_bitmask" in vars(Matcher)
    assert "fill_bitmask" not in vars(Matcher) and Matcher.fill_bitmask is MatcherBase.fill_bitmask

    lines = []
    report(profile, top=3, out=lines.append)
    largest = lines[lines.index("largest 3 steps:") + 1 :]
    assert len(largest) == 3
    micros = [float(line.split()[0]) for line in largest]
    assert micros == sorted(micros, reverse=True)
    assert micros[0] == pytest.approx(max(step.seconds for step in profile.steps) * 1e6, abs=1)


def test_step_profile_splits_the_phases_by_step_and_by_where_the_mask_is(smollm2):
    from bench.mask_bench import make_jobs
    from bench.step_profile import KINDS, PHASES_BY_KIND, profile_steps, report

    jobs = make_jobs(builtin_cases(SCHEMAS[:2]), smollm2)
    for rewalk in (False, True):
        profile = profile_steps(ENGINES["surecall"](smollm2), smollm2, jobs, rewalk=rewalk)
        # each step's phase times add up to the walk's totals (a rewalk's time is in neither)
        for label, seconds in profile.phases.items():
            assert sum(step.phases.get(label, 0.0) for step in profile.steps) == pytest.approx(seconds, rel=1e-9)
        assert all(0 < value <= step.seconds for step in profile.steps for value in step.phases.values())
        assert any(step.phases for step in profile.steps)

    lines = []
    report(profile, top=0, out=lines.append)
    start = lines.index("the largest phases by where the new mask is (% of all the steps' time):") + 1
    labels = [re.fullmatch(r"  \[(\d+)\] (.+)", line).group(2) for line in lines[start : start + PHASES_BY_KIND]]
    assert labels == sorted(profile.phases, key=lambda label: -profile.phases[label])[:PHASES_BY_KIND]
    rows = lines[start + len(labels) + 1 :]
    rows = rows[: rows.index("")]
    total = profile.total_seconds
    for row in rows:
        kind, numbers = row.split(":")
        steps = [step for step in profile.steps if step.kind == kind.strip()]
        shares = [float(number) for number in numbers.replace("%", " ").split()]
        assert shares[0] == pytest.approx(sum(step.seconds for step in steps) / total * 100, abs=0.06)
        for label, share in zip(labels, shares[1:]):
            assert share == pytest.approx(sum(step.phases.get(label, 0.0) for step in steps) / total * 100, abs=0.06)
    assert [row.split(":")[0].strip() for row in rows] == [
        kind for kind in KINDS if any(step.kind == kind for step in profile.steps)
    ]


def test_step_profile_rewalks_exactly_the_masks_that_built_states(smollm2):
    from bench.mask_bench import make_jobs
    from bench.step_profile import profile_steps, report

    jobs = make_jobs(builtin_cases(SCHEMAS), smollm2)
    engine = ENGINES["surecall"](smollm2)
    plain = profile_steps(engine, smollm2, jobs, phases=())
    again = profile_steps(engine, smollm2, jobs, phases=(), rewalk=True)
    # walking a mask again builds no state the next step would then miss
    assert [step.new_states for step in again.steps] == [step.new_states for step in plain.steps]
    assert all((step.rewalk_seconds is not None) == bool(step.new_states) for step in again.steps)
    assert any(step.rewalk_seconds for step in again.steps)
    assert all(step.rewalk_seconds is None for step in plain.steps)
    lines = []
    report(again, top=0, out=lines.append)
    assert sum(line.startswith("their masks walked again") for line in lines) == 1
    lines = []
    report(plain, top=0, out=lines.append)
    assert not any(line.startswith("their masks walked again") for line in lines)


def test_step_profile_names_how_each_new_mask_was_walked(smollm2):
    from bench.mask_bench import make_jobs
    from bench.step_profile import WALK_PATHS, profile_steps, report

    jobs = make_jobs(builtin_cases(SCHEMAS), smollm2)
    engine = ENGINES["surecall"](smollm2)
    profile = profile_steps(engine, smollm2, jobs, phases=())
    assert {step.path for step in profile.steps} <= set(WALK_PATHS) | {""}
    # a path exactly where the step's state had no mask yet, as the mask cache of a fresh
    # compile shows along the same walk
    for job in jobs:
        engine.clear_caches()
        session = engine.compile(job["schema_text"])
        session.fill_mask()
        masks = session._matcher._tables.masks
        grew, before = [], [len(masks)]

        def on_step(index, seconds, masks=masks, grew=grew, before=before):
            grew.append(len(masks) > before[0])
            before[0] = len(masks)

        assert walk(session, job["valid"][0], on_step=on_step)[0]
        assert [bool(step.path) for step in profile.steps if step.schema == job["id"]] == grew
    # both the plain walks and the token groups' are met on these schemas' strings and keys
    named = {step.path for step in profile.steps if step.path}
    assert named & set(WALK_PATHS[:3]) and named & set(WALK_PATHS[3:])
    lines = []
    report(profile, top=0, out=lines.append)
    start = lines.index("by how the new mask was walked (steps that walked one):") + 1
    rows = lines[start : start + len(named)]
    assert [row.split(":")[0].strip() for row in rows] == [path for path in WALK_PATHS if path in named]
    for row in rows:
        path = row.split(":")[0].strip()
        assert int(row.split(":")[1].split("steps")[0]) == sum(step.path == path for step in profile.steps)


def test_step_comparison_pairs_the_steps_both_engines_walked(smollm2):
    from bench.mask_bench import make_jobs
    from bench.step_profile import Profile, Step, compare, paired_steps, profile_steps

    def step(schema, index, seconds, states=None, kind="value start", path=""):
        return Step(schema, index, "", "t", seconds, states, kind=kind, path=path)

    ours = Profile(passing=["a", "b", "c"])
    ours.steps = [step("a", 0, 3e-3, 0), step("a", 1, 5e-3, 7, "object key, first byte", "group, looping"),
                  step("b", 0, 2e-3, 70), step("c", 0, 1e-3, 2), step("c", 1, 1e-3, 2)]
    theirs = Profile(passing=["a", "b", "c", "d"])
    # "c" refused by the other engine after one step: only schemas both walk whole pair up
    theirs.steps = [step("a", 0, 1e-3), step("a", 1, 1e-3), step("b", 0, 4e-3), step("c", 0, 1e-3),
                    step("d", 0, 1e-3)]
    pairs = paired_steps(ours, theirs)
    assert [(mine.schema, mine.index, their.schema, their.index) for mine, their in pairs] == [
        ("a", 0, "a", 0), ("a", 1, "a", 1), ("b", 0, "b", 0)]
    lines = []
    compare(ours, theirs, "other", top=2, out=lines.append)
    assert "on the 2 schemas both walk (3 steps): 10.0 ms against 6.0 ms (1.67x)" in lines[1]
    buckets = {line.split("states:")[0].strip(): line for line in lines if "states:" in line}
    assert set(buckets) == {"0", "5-19", ">= 60"}
    assert "3.0 ms against      1.0 ms, difference     +2.0 ms" in buckets["0"]
    assert "2.0 ms against      4.0 ms, difference     -2.0 ms" in buckets[">= 60"]
    kinds = [line for line in lines if line.strip().startswith(("object key", "value start"))]
    assert [line.split(":")[0].strip() for line in kinds] == ["object key, first byte", "value start"]
    assert "(5.00x)" in kinds[0] and "(1.00x)" in kinds[1]
    # by how our new masks were walked: only the step that walked one
    walked = lines[lines.index("by how the new mask was walked here (mean us a step):") + 1 :]
    assert walked[0].split(":")[0].strip() == "group, looping" and "1 steps" in walked[0] and "(5.00x)" in walked[0]
    assert walked[1].startswith("the 2 steps")
    # the largest differences first: +4 ms (a #1), then +2 ms (a #0); b's -2 ms is not listed
    largest = lines[lines.index("the 2 steps that take longest beyond other's:") + 1 :]
    assert [re.search(r"states  (\S+) +#(\d+)", line).groups() for line in largest] == [("a", "1"), ("a", "0")]

    # on real walks: an engine against itself pairs every step
    jobs = make_jobs(builtin_cases(SCHEMAS[:1]), smollm2)
    walked = profile_steps(ENGINES["surecall"](smollm2), smollm2, jobs, phases=())
    again = profile_steps(ENGINES["surecall"](smollm2), smollm2, jobs, phases=())
    assert len(paired_steps(walked, again)) == len(walked.steps) == len(jobs[0]["valid"][0])


def test_a_forgotten_mask_is_walked_again_to_the_same_bits(smollm2):
    from bench.mask_bench import make_jobs

    job = make_jobs(builtin_cases(SCHEMAS[:1]), smollm2)[0]
    session = ENGINES["surecall"](smollm2).compile(job["schema_text"])
    session.fill_mask()
    for token_id in job["valid"][0][:6]:
        assert session.advance(token_id)
        session.fill_mask()
    masks, config = session._matcher._tables.masks, session._matcher.config
    first, cached = session.bitmask.copy(), masks.get(config)
    assert cached is not None
    states = session.parse_states()
    session.forget_mask()
    assert masks.get(config) is None
    session.fill_mask()
    assert (session.bitmask == first).all()
    assert masks.get(config) is not None and masks.get(config) is not cached
    assert session.parse_states() == states


def test_step_cost_fit_separates_what_a_step_and_a_state_cost():
    from bench.step_profile import Step, state_cost_fit

    def step(states, micros):
        return Step("s", 0, "", "", micros / 1e6, states)

    # Steps that built no state (cached masks) are left out of the fit.
    steps = [step(n, 100 + 20 * n) for n in (1, 3, 10, 40)] + [step(0, 5), step(None, 7)]
    per_step, per_state = state_cost_fit(steps)
    assert per_step == pytest.approx(100) and per_state == pytest.approx(20)
    assert state_cost_fit([step(2, 50), step(2, 70), step(0, 5)]) is None


def test_step_profile_of_a_peer_reports_no_parse_states(smollm2):
    from bench.mask_bench import make_jobs
    from bench.step_profile import profile_steps

    jobs = make_jobs(builtin_cases(SCHEMAS[:1]), smollm2)
    profile = profile_steps(ENGINES["llguidance"](smollm2), smollm2, jobs, phases=())
    assert profile.passing == [SCHEMAS[0]]
    assert len(profile.steps) == len(jobs[0]["valid"][0])
    assert all(step.new_states is None for step in profile.steps)
    assert profile.phases == {}


def test_json_position_names_where_a_mask_is_in_the_text_so_far():
    from bench.step_profile import KINDS, json_position

    cases = {
        '{"': "object key, first byte",
        '{"a":1,"': "object key, first byte",
        '{"na': "object key, later bytes",
        '{"a":"': "string value, first byte",
        '{"a":"x\\"': "string value, later bytes",  # an escaped quote does not close it
        '{"a":["x","': "string value, first byte",  # an array's strings are values, not keys
        '{"a":{"b":[1,{"': "object key, first byte",
        "{": "before an object key",
        '{"a":1,': "before an object key",
        '{"a"': "after an object key",
        '{"a":': "value start",
        '{"a":[1,': "value start",
        "": "value start",
        '{"a":12': "inside a number or literal",
        '{"a":tr': "inside a number or literal",
        '{"a":"b"': "after a value",
        '{"a":[1]': "after a value",
        '{"a":{}}': "after a value",
    }
    for text, kind in cases.items():
        assert json_position(text) == kind, text
    assert set(cases.values()) == set(KINDS)


def test_step_profile_reports_time_by_where_the_mask_is(smollm2):
    from bench.mask_bench import make_jobs
    from bench.step_profile import KINDS, json_position, profile_steps, report

    jobs = make_jobs(builtin_cases(SCHEMAS[:2]), smollm2)
    profile = profile_steps(ENGINES["surecall"](smollm2), smollm2, jobs, phases=())
    for job in jobs:
        path = job["valid"][0]
        steps = [step for step in profile.steps if step.schema == job["id"]]
        assert [step.kind for step in steps] == [json_position(smollm2.decode(path[: i + 1])) for i in range(len(path))]
    lines = []
    report(profile, top=0, out=lines.append)
    start = lines.index("by where the new mask is (the JSON text so far):") + 1
    rows = lines[start : lines.index("", start)]
    parsed = [re.fullmatch(r"\s*(.+?): +(\d+) steps, +([\d.]+)% of the time, .*", row).groups() for row in rows]
    kinds = [kind for kind, _, _ in parsed]
    assert kinds == [kind for kind in KINDS if any(step.kind == kind for step in profile.steps)]
    for kind, count, _ in parsed:
        assert int(count) == sum(step.kind == kind for step in profile.steps)
    assert sum(float(share) for _, _, share in parsed) == pytest.approx(100, abs=0.1 * len(rows))


@pytest.mark.model
def test_forward_passes_are_timed_one_by_one_and_a_second_round_meets_no_new_shape(local_model):
    from bench import forward_passes
    from bench.e2e_bench import PROMPTS
    from surecall.adapters.transformers import decode as decode_module

    original_forward = decode_module._BatchDecoder._forward
    original_switch = decode_module.attention_without_cudnn
    with forward_passes.default_attention_backends():
        assert decode_module.attention_without_cudnn is not original_switch
        rows = forward_passes.run(local_model, rounds=2, max_tokens=16, prompts=PROMPTS[:1], log=lambda line: None)
    # The wrappers are gone once the run is over.
    assert decode_module._BatchDecoder._forward is original_forward
    assert decode_module.attention_without_cudnn is original_switch

    assert [(row["round"], row["loop"]) for row in rows] == [
        (1, "constrained"), (1, "unconstrained"), (2, "constrained"), (2, "unconstrained")]
    for row in rows:
        assert row["passes"] == row["forward_passes"] > 1  # every pass of the loop was timed
        assert 0 < row["prompt_pass_ms"] <= 1000 * row["seconds"]
    first_constrained, first_unconstrained, second_constrained, second_unconstrained = rows
    # Greedy decoding repeats the same shapes: nothing is new the second time through.
    for row in (second_constrained, second_unconstrained):
        assert row["one_token_new_ms"] is None and row["several_new_ms"] is None
        assert row["one_token_seen_ms"] is not None
    # The fast path feeds forced runs of several tokens, so it takes fewer passes than tokens.
    assert first_constrained["widths"] and min(first_constrained["widths"]) >= 2
    assert first_constrained["passes"] < first_constrained["tokens"]
    assert first_unconstrained["widths"] == []


def test_clearing_caches_forgets_what_grammars_share_by_value(smollm2):
    from surecall.engine import automaton

    engine = ENGINES["surecall"](smollm2)
    # A pattern unanchored at both ends is a search; "format": "email" is an intersection.
    schema = {"type": "object", "properties": {"a": {"type": "string", "pattern": "abc"},
                                               "b": {"type": "string", "format": "email"}}}
    engine.compile(json.dumps(schema)).fill_mask()
    assert automaton._search_cache and automaton._operand_cache
    engine.clear_caches()
    assert not automaton._search_cache and not automaton._operand_cache
