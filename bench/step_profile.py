"""Where a walk's mask time goes: the mask benchmark's steps in one process, taken apart.

    python -m bench.step_profile --tokenizer qwen                 # surecall on the full run's schemas
    python -m bench.step_profile --tokenizer qwen --engine llguidance
    python -m bench.step_profile --schemas Github_hard/o50114,send_email --top 40
    python -m bench.step_profile --tokenizer qwen --rewalk        # new masks again, states built
    python -m bench.step_profile --tokenizer qwen --against llguidance   # step by step against a peer

Each schema is compiled cold (the engine's caches cleared, as ``mask_bench`` does) and
walked once along its first valid instance; every step is one ``advance`` plus the next
full-vocabulary mask, timed as in ``mask_bench``. Printed: the step total, mean, p50 and
p99; (surecall) the parse states built and what the steps that built some cost a step
and a state (``state_cost_fit``); how the total splits by step duration; the largest
steps with the text before them, the token and (surecall) the parse states the step
built; and for surecall the time spent inside each engine phase during the steps
(``PHASES``: inclusive, so phases that call each other overlap), the largest phases also
by where the new mask is. ``--against`` walks another engine on the same paths afterwards
and compares the two step by step (``compare``): the totals on the schemas both walk, the
time by how many parse states each step built (steps that build none against those that
build many), by where the new mask is, and the steps that take longest beyond the other
engine's. Unlike ``mask_bench`` this runs in the calling process, on
whatever core it is given (``taskset -c 1 python -m bench.step_profile``), so its numbers
compare with another run of it on the same machine, not with the benchmark's tables.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

import numpy as np  # noqa: E402

# (module, attribute path, what it is): surecall functions whose time inside steps is reported.
PHASES = (
    ("surecall.engine.matcher", "Matcher.advance", "advance (state after the token, can it go on)"),
    ("surecall.engine.matcher", "Matcher._new_entry", "new masks (everything below)"),
    ("surecall.engine.native", "walk", "native trie walks (with the states they build)"),
    ("surecall.engine.matcher", "Matcher._chain_group", "choosing a token group"),
    ("surecall.engine.token_groups", "TokenGroup.exits_from", "a group's exit paths"),
    ("surecall.engine.automaton", "ByteAutomaton._compute_row_by_class", "rows computed by byte class (Python)"),
    ("surecall.engine.automaton", "ByteAutomaton._byte_classes", "byte classes of rows computed by class"),
    ("surecall.engine.automaton", "ByteAutomaton.utf8_agrees", "multi-byte character checks"),
    ("surecall.engine.matcher", "MaskEntry.__init__", "packing masks"),
)
_INHERITED = object()
#: Step durations (us) the total is split by.
BUCKETS_US = (0, 20, 50, 100, 200, 500, 1000)


@dataclass
class Step:
    schema: str
    index: int
    before: str
    token: str
    seconds: float
    new_states: int | None
    #: With ``rewalk``: the step's mask walked again once its parse states existed.
    rewalk_seconds: float | None = None
    #: Where in the JSON text the step's new mask is (``json_position``).
    kind: str = ""
    #: Seconds inside each phase during the step (inclusive, as ``Profile.phases``).
    phases: dict[str, float] = field(default_factory=dict)
    #: (surecall) How the step's new mask was walked (one of ``WALK_PATHS``; "" when the
    #: step walked no mask: its state's was cached).
    path: str = ""


#: The kinds of ``json_position``, in the order the report lists them.
KINDS = (
    "object key, first byte",
    "object key, later bytes",
    "string value, first byte",
    "string value, later bytes",
    "before an object key",
    "after an object key",
    "value start",
    "inside a number or literal",
    "after a value",
)


def json_position(text: str) -> str:
    """Where a mask at the end of the JSON text ``text`` (a prefix of a valid document) is:
    inside an object key or a string value (at its first byte or later), where a value
    starts (after ``:``, ``[`` or an array's ``,``), inside a number or ``true``/``false``/
    ``null``, before an object key's quote or after its closing one, or after a complete
    value (a ``,`` or a closing bracket may come)."""
    containers: list[str] = []
    in_string = escaped = False
    string_is_key = string_empty = False
    # What the last structural character allows next: "key" (after { or an object's ,),
    # "colon" (a key ended), "value" (after :, [ or an array's ,) or "after" (a value ended).
    expecting = "value"
    in_scalar = False
    for char in text:
        if in_string:
            string_empty = False
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
                expecting = "colon" if string_is_key else "after"
            continue
        if char == '"':
            in_string, string_is_key, string_empty, in_scalar = True, expecting == "key", True, False
        elif char in "{[":
            containers.append(char)
            expecting, in_scalar = ("key" if char == "{" else "value"), False
        elif char in "}]":
            if containers:
                containers.pop()
            expecting, in_scalar = "after", False
        elif char == ":":
            expecting, in_scalar = "value", False
        elif char == ",":
            expecting = "key" if containers and containers[-1] == "{" else "value"
            in_scalar = False
        elif not char.isspace():
            in_scalar = True
            expecting = "after"
    if in_string:
        where = "object key" if string_is_key else "string value"
        return f"{where}, {'first byte' if string_empty else 'later bytes'}"
    if in_scalar:
        return "inside a number or literal"
    return {"key": "before an object key", "colon": "after an object key", "value": "value start"}.get(
        expecting, "after a value")


#: How surecall walks a new mask (``walk_path``): down a forced byte from the root (a
#: literal); the plain native walk of the whole trie (no token group, or one too small to
#: pay); or a token group decided at once and the subtrees where tokens leave it walked,
#: the group's characters looping back to the state, leading along a chain of states (a
#: counted or changing string), or holding for all but some first bytes that go their own
#: way (an object key where some letters start known keys).
WALK_PATHS = (
    "forced byte",
    "no token group",
    "small token group",
    "group, looping",
    "group, along a chain",
    "group, first bytes excepted",
)


def walk_path(matcher, config: int, from_root: bool) -> str:
    """Which of ``WALK_PATHS`` ``matcher`` took for its new mask at ``config`` (read after the
    walk, from the group it chose: nothing is computed here)."""
    from surecall.engine.matcher import _GROUP_WALK_SHARE

    if not from_root:
        return WALK_PATHS[0]
    found = matcher._tables.chain_groups.get(config)
    if found is None:
        return WALK_PATHS[1]
    group, chain, exceptions = found
    if matcher._small_group(group, _GROUP_WALK_SHARE):
        return WALK_PATHS[2]
    if chain is None:
        return WALK_PATHS[3]
    return WALK_PATHS[5] if exceptions is not None else WALK_PATHS[4]


@contextlib.contextmanager
def recorded_walk_paths():
    """Note the ``walk_path`` of each new mask surecall walks, in order, in the yielded list;
    the matcher's methods are back on exit."""
    try:
        from surecall.engine.matcher import Matcher
    except ImportError:
        yield []
        return
    paths: list[str] = []
    new_entry, walk_from_root = vars(Matcher)["_new_entry"], vars(Matcher)["_walk_from_root"]
    from_root = [False]

    def noted_new_entry(self, config, *args, **kwargs):
        outer = from_root[0]
        from_root[0] = False
        try:
            found = new_entry(self, config, *args, **kwargs)
            # A mask one walk makes whole (``_whole_walk_bits``) comes down a forced byte, or
            # from the root with no group chosen.
            paths.append(walk_path(self, config, from_root[0] or self._only_next_byte(config) < 0))
            return found
        finally:
            from_root[0] = outer

    def noted_walk_from_root(self, *args, **kwargs):
        from_root[0] = True
        return walk_from_root(self, *args, **kwargs)

    Matcher._new_entry, Matcher._walk_from_root = noted_new_entry, noted_walk_from_root
    try:
        yield paths
    finally:
        Matcher._new_entry, Matcher._walk_from_root = new_entry, walk_from_root


@dataclass
class Profile:
    steps: list[Step] = field(default_factory=list)
    phases: dict[str, float] = field(default_factory=dict)
    passing: list[str] = field(default_factory=list)
    failing: list[str] = field(default_factory=list)

    @property
    def total_seconds(self) -> float:
        return sum(step.seconds for step in self.steps)


def _resolve(module_name: str, attribute_path: str):
    """(owner, attribute name) of a phase, or None where this version has no such function."""
    try:
        owner = importlib.import_module(module_name)
    except ImportError:
        return None
    *parents, name = attribute_path.split(".")
    for parent in parents:
        owner = getattr(owner, parent, None)
        if owner is None:
            return None
    return (owner, name) if hasattr(owner, name) else None


@contextlib.contextmanager
def timed_phases(phases=PHASES):
    """Wrap each phase's function to add its time to the yielded dict (outermost calls only,
    so recursion is not counted twice); the original functions are back on exit."""
    spent: dict[str, float] = {}
    restore = []
    clock = time.perf_counter

    def timed(label, function):
        depth = [0]

        def wrapper(*args, **kwargs):
            if depth[0]:
                return function(*args, **kwargs)
            depth[0] += 1
            start = clock()
            try:
                return function(*args, **kwargs)
            finally:
                spent[label] = spent.get(label, 0.0) + clock() - start
                depth[0] -= 1

        return wrapper

    try:
        for module_name, attribute_path, label in phases:
            found = _resolve(module_name, attribute_path)
            if found is None:
                continue
            owner, name = found
            # The owner's own entry (a class's __dict__: an inherited method has none, and
            # is deleted again), so that what is put back is exactly what was there.
            original = vars(owner).get(name, _INHERITED)
            restore.append((owner, name, original))
            setattr(owner, name, timed(label, getattr(owner, name)))
        yield spent
    finally:
        for owner, name, original in reversed(restore):
            if original is _INHERITED:
                delattr(owner, name)
            else:
                setattr(owner, name, original)


def profile_steps(engine, tokenizer, jobs, *, phases=PHASES, rewalk: bool = False) -> Profile:
    """Compile each job's schema cold and walk its first valid path (see the module docstring).

    With ``rewalk`` (surecall), after each step that built parse states its mask is
    forgotten and walked again, untimed in the step and outside the phases: what the mask
    costs once the states it needs exist (``Step.rewalk_seconds``)."""
    from bench.mask_bench import walk
    from bench.peers import CompileError

    profile = Profile()
    with recorded_walk_paths() as paths, timed_phases(phases) as spent:
        for job in jobs:
            engine.clear_caches()
            gc.collect()
            try:
                session = engine.compile(job["schema_text"])
                session.fill_mask()
            except CompileError:
                profile.failing.append(job["id"])
                continue
            paths.clear()  # the first mask's, not a step's
            path = job["valid"][0]
            before_walk = dict(spent)
            states = [session.parse_states()]
            steps: list[Step] = []
            before_step = [dict(spent)]

            def on_step(index, seconds, session=session, job=job, path=path, states=states, steps=steps):
                walked = paths[-1] if paths else ""
                now = session.parse_states()
                new = None if now is None or states[0] is None else now - states[0]
                inside = {label: total - before_step[0].get(label, 0.0) for label, total in spent.items()}
                again = _rewalk_seconds(session, spent) if rewalk and new else None
                states[0] = session.parse_states()
                steps.append(Step(job["id"], index, tokenizer.decode(path[max(0, index - 3) : index]),
                                  tokenizer.decode(path[index : index + 1]), seconds, new, again,
                                  json_position(tokenizer.decode(path[: index + 1])),
                                  {label: value for label, value in inside.items() if value > 0}, walked))
                before_step[0] = dict(spent)
                paths.clear()  # the rewalk's too

            accepted, _ = walk(session, path, on_step=on_step)
            # A refused path's steps are not the benchmark's (it counts passing schemas only).
            if not accepted:
                profile.failing.append(job["id"])
                continue
            profile.passing.append(job["id"])
            profile.steps.extend(steps)
            for label, seconds in spent.items():
                profile.phases[label] = profile.phases.get(label, 0.0) + seconds - before_walk.get(label, 0.0)
    return profile


def _rewalk_seconds(session, spent: dict) -> float | None:
    """Seconds to walk the session's current mask again, its parse states kept (None for
    an engine that cannot forget a mask); the phases' totals are left as they were."""
    forget = getattr(session, "forget_mask", None)
    if forget is None:
        return None
    kept = dict(spent)
    forget()
    start = time.perf_counter()
    session.fill_mask()
    seconds = time.perf_counter() - start
    spent.clear()
    spent.update(kept)
    return seconds


def state_cost_fit(steps: list[Step]) -> tuple[float, float] | None:
    """(microseconds a step, microseconds a state built) fitted by least squares over the
    steps that built parse states: what a new mask costs besides its states, and what each
    state costs. None without two such steps of different counts."""
    building = [step for step in steps if step.new_states]
    counts = np.array([step.new_states for step in building], dtype=float)
    if len(set(counts.tolist())) < 2:
        return None
    micros = np.array([step.seconds for step in building]) * 1e6
    per_step, per_state = np.linalg.lstsq(np.column_stack([np.ones_like(counts), counts]), micros, rcond=None)[0]
    return float(per_step), float(per_state)


def report(profile: Profile, *, top: int = 20, out=print) -> None:
    micros = np.array([step.seconds for step in profile.steps]) * 1e6
    total = micros.sum()
    out(f"{len(profile.passing)} schemas walked, {len(profile.failing)} refused or failed to compile")
    if not len(micros):
        return
    out(f"{len(micros)} steps: total {total / 1e3:.1f} ms, mean {micros.mean():.1f} us, "
        f"p50 {np.percentile(micros, 50):.1f} us, p99 {np.percentile(micros, 99):.0f} us, max {micros.max():.0f} us")
    new_states = [step.new_states for step in profile.steps if step.new_states is not None]
    if new_states:
        out(f"parse states built during the steps: {sum(new_states)}")
        fit = state_cost_fit(profile.steps)
        if fit is not None:
            building = [step for step in profile.steps if step.new_states]
            out(f"steps that built states: {len(building)}, {sum(s.seconds for s in building) * 1e6 / total * 100:.1f}% "
                f"of the time, least squares over them: {fit[0]:.0f} us a step + {fit[1]:.1f} us a state")
    rewalked = [step for step in profile.steps if step.rewalk_seconds is not None]
    if rewalked:
        first = sum(step.seconds for step in rewalked) * 1e6
        again = np.array([step.rewalk_seconds for step in rewalked]) * 1e6
        out(f"their masks walked again once their states exist: {again.sum() / 1e3:.1f} ms against "
            f"{first / 1e3:.1f} ms for the steps ({again.sum() / first * 100:.0f}%), mean {again.mean():.0f} us, "
            f"p99 {np.percentile(again, 99):.0f} us; all steps so: mean "
            f"{(total - first + again.sum()) / len(micros):.1f} us")
    out("")
    out("steps by duration:")
    for low, high in zip(BUCKETS_US, BUCKETS_US[1:] + (float("inf"),)):
        inside = (micros >= low) & (micros < high)
        span = f"{low}-{high} us" if high != float("inf") else f">= {low} us"
        out(f"  {span:>13}: {int(inside.sum()):6d} steps, {micros[inside].sum() / total * 100:5.1f}% of the time")
    kinds = [step.kind for step in profile.steps]
    if any(kinds):
        out("")
        out("by where the new mask is (the JSON text so far):")
        for kind in KINDS:
            inside = np.array([k == kind for k in kinds])
            if not inside.any():
                continue
            built = sum(step.new_states or 0 for step, k in zip(profile.steps, kinds) if k == kind)
            out(f"  {kind:>28}: {int(inside.sum()):6d} steps, {micros[inside].sum() / total * 100:5.1f}% of the time, "
                f"mean {micros[inside].mean():7.1f} us, {built} states built")
    if any(step.path for step in profile.steps):
        out("")
        out("by how the new mask was walked (steps that walked one):")
        for path in WALK_PATHS:
            steps = [step for step in profile.steps if step.path == path]
            if not steps:
                continue
            spent = sum(step.seconds for step in steps) * 1e6
            built = sum(step.new_states or 0 for step in steps)
            again = [step.rewalk_seconds for step in steps if step.rewalk_seconds is not None]
            walked_again = f", walked again {np.mean(again) * 1e6:7.1f} us ({len(again)})" if again else ""
            out(f"  {path:>28}: {len(steps):6d} steps, {spent / total * 100:5.1f}% of the time, "
                f"mean {spent / len(steps):7.1f} us, {built} states built{walked_again}")
    if profile.phases:
        out("")
        out("inside the steps (inclusive; phases that call each other overlap):")
        for label, seconds in sorted(profile.phases.items(), key=lambda item: -item[1]):
            out(f"  {seconds * 1e3:8.1f} ms  {seconds * 1e6 / total * 100:5.1f}%  {label}")
        if any(kinds):
            _report_phases_by_kind(profile, total, out)
    out("")
    out(f"largest {min(top, len(micros))} steps:")
    for step in sorted(profile.steps, key=lambda s: -s.seconds)[:top]:
        built = "" if step.new_states is None else f"{step.new_states:5d} new states  "
        out(f"  {step.seconds * 1e6:9.0f} us  {built}{step.schema[:36]:36s} #{step.index:<4d} "
            f"{step.before[-18:]!r:>22} + {step.token!r}")


#: How many of the largest phases ``report`` splits by where the new mask is.
PHASES_BY_KIND = 5
#: The lower ends of the groups of steps ``compare`` splits by parse states built.
STATE_BUCKETS = (0, 1, 5, 20, 60)


def paired_steps(profile: Profile, other: Profile) -> list[tuple[Step, Step]]:
    """The steps of both profiles on the same schema and token, for the schemas both walked
    whole (an engine's steps exist only on the schemas it passes)."""
    ours, theirs = _steps_by_schema(profile), _steps_by_schema(other)
    pairs = []
    for schema in profile.passing:
        mine, their = ours.get(schema, []), theirs.get(schema, [])
        if their and len(their) == len(mine):
            pairs.extend(zip(mine, their))
    return pairs


def _steps_by_schema(profile: Profile) -> dict[str, list[Step]]:
    found: dict[str, list[Step]] = {}
    for step in profile.steps:
        found.setdefault(step.schema, []).append(step)
    return found


def compare(profile: Profile, other: Profile, name: str, *, top: int = 20, out=print) -> None:
    """Step by step against another engine's profile of the same walks: the totals, the
    time by how many parse states the step built here (where the difference lies), by where
    the new mask is, and the steps that differ most."""
    pairs = paired_steps(profile, other)
    out("")
    if not pairs:
        out(f"against {name}: no schema walked whole by both")
        return
    ours = sum(mine.seconds for mine, _ in pairs) * 1e3
    theirs = sum(their.seconds for _, their in pairs) * 1e3
    schemas = len({mine.schema for mine, _ in pairs})
    out(f"against {name}, on the {schemas} schemas both walk ({len(pairs)} steps): "
        f"{ours:.1f} ms against {theirs:.1f} ms ({ours / theirs:.2f}x)")
    if all(mine.new_states is not None for mine, _ in pairs):
        out("by parse states the step built here:")
        for low, high in zip(STATE_BUCKETS, STATE_BUCKETS[1:] + (None,)):
            inside = [(mine, their) for mine, their in pairs
                      if mine.new_states >= low and (high is None or mine.new_states < high)]
            if not inside:
                continue
            span = f"{low}" if high == low + 1 else (f"{low}-{high - 1}" if high is not None else f">= {low}")
            mine_ms = sum(m.seconds for m, _ in inside) * 1e3
            their_ms = sum(t.seconds for _, t in inside) * 1e3
            out(f"  {span:>8} states: {len(inside):6d} steps, {mine_ms:8.1f} ms against {their_ms:8.1f} ms, "
                f"difference {mine_ms - their_ms:+8.1f} ms")
    _compare_means(pairs, "kind", KINDS, "by where the new mask is (mean us a step):", out)
    _compare_means(pairs, "path", WALK_PATHS, "by how the new mask was walked here (mean us a step):", out)
    out(f"the {min(top, len(pairs))} steps that take longest beyond {name}'s:")
    for mine, their in sorted(pairs, key=lambda pair: pair[1].seconds - pair[0].seconds)[:top]:
        built = "" if mine.new_states is None else f"{mine.new_states:5d} new states  "
        out(f"  {mine.seconds * 1e6:9.0f} us against {their.seconds * 1e6:7.0f}  {built}{mine.schema[:36]:36s} "
            f"#{mine.index:<4d} {mine.before[-18:]!r:>22} + {mine.token!r}")


def _compare_means(pairs: list, field_name: str, labels: tuple, title: str, out) -> None:
    """Both engines' mean step for each label of one of our steps' fields (where the mask
    is, how it was walked), in ``labels``' order; nothing when no step has one."""
    if not any(getattr(mine, field_name) for mine, _ in pairs):
        return
    out(title)
    for label in labels:
        inside = [(mine, their) for mine, their in pairs if getattr(mine, field_name) == label]
        if not inside:
            continue
        mine_us = sum(m.seconds for m, _ in inside) * 1e6 / len(inside)
        their_us = sum(t.seconds for _, t in inside) * 1e6 / len(inside)
        out(f"  {label:>28}: {len(inside):6d} steps, {mine_us:8.1f} against {their_us:8.1f} "
            f"({mine_us / their_us:.2f}x)")


def _report_phases_by_kind(profile: Profile, total: float, out) -> None:
    """The largest phases' time by where the new mask is, as shares of all steps' time:
    which phase to make cheaper where."""
    labels = [label for label, _ in sorted(profile.phases.items(), key=lambda item: -item[1])][:PHASES_BY_KIND]
    out("")
    out("the largest phases by where the new mask is (% of all the steps' time):")
    for number, label in enumerate(labels, 1):
        out(f"  [{number}] {label}")
    out(f"  {'':>28}  {'steps':>6}" + "".join(f"{f'[{number}]':>7}" for number in range(1, len(labels) + 1)))
    for kind in KINDS:
        steps = [step for step in profile.steps if step.kind == kind]
        if not steps:
            continue
        shares = [sum(step.phases.get(label, 0.0) for step in steps) * 1e6 / total * 100 for label in labels]
        own = sum(step.seconds for step in steps) * 1e6 / total * 100
        out(f"  {kind:>28}: {own:5.1f}%" + "".join(f"{share:6.1f}%" for share in shares))


def main(argv=None) -> Profile:
    from bench.cases import builtin_cases, jsb_cases
    from bench.mask_bench import make_jobs, prepared_engine
    from bench.run import DEFAULT_SEED, FULL

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokenizer", default="qwen", help="smollm2, deepseek or qwen")
    parser.add_argument("--engine", default="surecall", help="an engine of bench/peers.py")
    parser.add_argument("--schemas", help="comma list of schema ids (default: the full run's)")
    parser.add_argument("--per-subset", type=int, default=FULL["per_subset"])
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--top", type=int, default=20, help="how many of the largest steps to list")
    parser.add_argument("--rewalk", action="store_true",
                        help="also time each new mask walked again once its parse states exist (surecall)")
    parser.add_argument("--against", metavar="ENGINE",
                        help="also walk another engine of bench/peers.py on the same paths and compare step by step")
    args = parser.parse_args(argv)
    tokenizer, engine, _ = prepared_engine(args.engine, args.tokenizer)
    cases = builtin_cases() + jsb_cases(args.per_subset, args.seed)
    if args.schemas:
        wanted = set(args.schemas.split(","))
        cases = [case for case in cases if case.id in wanted or case.id.split("/")[-1] in wanted]
    jobs = make_jobs(cases, tokenizer)
    profile = profile_steps(engine, tokenizer, jobs, rewalk=args.rewalk)
    report(profile, top=args.top)
    if args.against:
        _, peer, _ = prepared_engine(args.against, args.tokenizer)
        compare(profile, profile_steps(peer, tokenizer, jobs, phases=()), args.against, top=args.top)
    return profile


if __name__ == "__main__":
    main()
