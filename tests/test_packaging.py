"""Packaging: one import namespace, no stray top-level modules, a framework-free engine."""

import json
import os
import subprocess
import sys

import pytest

HEAVY_FRAMEWORKS = ("torch", "pydantic", "langchain", "langchain_core", "transformers")


def _run_python(code, cwd):
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    return subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


def _json_from(completed):
    assert completed.returncode == 0, completed.stderr
    return json.loads(completed.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("folder", ["engine", "sdk", "adapters"])
def test_source_folders_are_not_importable_as_top_level_modules(folder, tmp_path):
    completed = _run_python(f"import {folder}", cwd=tmp_path)
    assert completed.returncode != 0
    assert "ModuleNotFoundError" in completed.stderr


def test_public_packages_import_from_an_unrelated_directory(tmp_path):
    code = (
        "import json, surecall, surecall.engine, surecall.adapters, surecall.adapters.transformers\n"
        "print(json.dumps([surecall.__name__, surecall.engine.__name__, surecall.adapters.__name__,"
        " isinstance(surecall.__version__, str)]))"
    )
    assert _json_from(_run_python(code, cwd=tmp_path)) == [
        "surecall",
        "surecall.engine",
        "surecall.adapters",
        True,
    ]


def test_engine_modules_import_no_heavy_frameworks(tmp_path):
    code = (
        "import importlib, json, pkgutil, sys\n"
        "import surecall.engine as engine\n"
        "modules = sorted(info.name for info in pkgutil.walk_packages(engine.__path__, 'surecall.engine.'))\n"
        "for name in modules:\n"
        "    importlib.import_module(name)\n"
        f"heavy = sorted(name for name in sys.modules if name.split('.')[0] in {HEAVY_FRAMEWORKS!r})\n"
        "print(json.dumps({'modules': modules, 'heavy': heavy}))"
    )
    report = _json_from(_run_python(code, cwd=tmp_path))
    assert "surecall.engine.ir" in report["modules"]
    assert report["heavy"] == []


def test_importing_surecall_and_its_adapters_package_stays_light(tmp_path):
    code = (
        "import json, sys\n"
        "import surecall, surecall.adapters, surecall.adapters.transformers\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'transformers'))))"
    )
    assert _json_from(_run_python(code, cwd=tmp_path)) == []


def test_native_code_is_built_and_can_be_turned_off(tmp_path):
    # The install builds the extension (a C compiler is part of the set-up); the
    # environment switch leaves the numpy walk and the Python state building, which the
    # engine tests compare with it.
    code = (
        "import json; from surecall.engine import native; from surecall.engine.grammar import Grammar\n"
        "automaton = Grammar.from_ebnf(\"start ::= 'a'+;\").automaton\n"
        "print(json.dumps(native.AVAILABLE and native.walk is not None and automaton._native is not None))"
    )
    assert _json_from(_run_python(code, cwd=tmp_path)) is True
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    env["SURECALL_NATIVE"] = "0"
    completed = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert _json_from(completed) is False
