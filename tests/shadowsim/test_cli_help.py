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
