"""What `shadowsim` says about itself is true: section references in --help exist and name the right topic, and
the dispatcher's docstring describes what command modules really expose."""
from __future__ import annotations

import importlib
import re
from pathlib import Path

from shadowsim import cli

ACCURACY = Path(__file__).resolve().parents[2] / "docs" / "accuracy.md"


def _help_of(command: str, option: str) -> str:
    parser = cli.build_parser(command)
    sub = next(a for a in parser._actions if a.dest == "command").choices[command]
    return next(a.help for a in sub._actions if option in a.option_strings)


def test_output_path_help_points_to_the_section_about_the_output_path() -> None:
    text = _help_of("validate", "--output-path-us-per-step")
    ref = re.search(r"docs/accuracy\.md §?(\d+\.\d+)", text)
    assert ref is not None and ref.group(1) == "3.6"
    headings = dict(re.findall(r"^### (\d+\.\d+) (.*)$", ACCURACY.read_text(), flags=re.M))
    assert "output path" in headings[ref.group(1)].lower()


def test_cli_docstring_names_only_what_command_modules_expose() -> None:
    sentence = next(line for line in cli.__doc__.splitlines() if "exposes" in line)
    named = re.findall(r"``(\w+)", sentence)
    assert named == ["add_arguments", "run"]
    for name, _ in cli.COMMANDS:
        mod = importlib.import_module(f"shadowsim.commands.{name}")
        assert all(callable(getattr(mod, n, None)) for n in named), name
    # ... and the dispatcher reads nothing else of a module (name and help come from COMMANDS)
    source = Path(cli.__file__).read_text()
    assert re.findall(r"\b(?:mod|module|args\._module)\.(\w+)", source) and set(
        re.findall(r"\b(?:mod|module|args\._module)\.(\w+)", source)) <= {*named, "__doc__"}


def test_the_program_freezes_the_collector_before_exit_and_a_call_from_python_does_not() -> None:
    """``shadowsim.cli.main()`` as the program (no arguments: the console script, ``python -m shadowsim``) moves
    every tracked object to the collector's permanent generation before returning (the interpreter's teardown then
    traverses nothing: docs/architecture.md, Start-up, fifth pass); ``main([...])`` from Python code leaves the
    collector alone. The exit status and the output are the command's either way."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    code = """
import gc, io, json, sys, contextlib
from shadowsim.cli import main
out = io.StringIO()
with contextlib.redirect_stdout(out):
    rc_call = main(["models"])
after_call = gc.get_freeze_count()
sys.argv = ["shadowsim", "models"]
with contextlib.redirect_stdout(io.StringIO()) as out2:
    rc_prog = main()
print(json.dumps({"rc": [rc_call, rc_prog], "call": after_call, "prog": gc.get_freeze_count(),
                  "same_output": out.getvalue() == out2.getvalue() and "Llama" in out.getvalue()}))
"""
    root = Path(__file__).resolve().parents[2]
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root, check=True)
    got = json.loads(run.stdout.strip().splitlines()[-1])
    assert got["rc"] == [0, 0] and got["call"] == 0 and got["prog"] > 10_000 and got["same_output"]
