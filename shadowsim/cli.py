"""`shadowsim` command line: one sub-command per module in `shadowsim.commands`.

Each command module exposes ``add_arguments(parser)`` and ``run(args) -> int``, the only names read from it; its
name and one-line help are its entry in ``COMMANDS`` below (a module's own NAME/HELP constants, where present,
are not read), and its module docstring is the command's ``--help`` description.
Modules are imported lazily so `shadowsim --help` stays fast and one broken command cannot hide the others.
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys
from pathlib import Path

from simcore.errors import UserError

# (module name under shadowsim.commands, one-line help) in the order --help shows them.
COMMANDS: list[tuple[str, str]] = [
    ("predict", "simulate an SGLang server on a workload and print TTFT/TPOT/throughput"),
    ("report", "write a self-contained HTML report (plots) from saved --json results"),
    ("models", "list the catalogued models (architecture, size, context) — --json"),
    ("gpus", "list the catalogued GPUs (memory, bandwidth, peak FLOP/s) — --json"),
    ("validate", "compare predictions with a file of real benchmark measurements"),
    ("sweep", "simulate many GPU/TP/flag/load combinations: table, Pareto front, SLO attainment"),
    ("calibrate", "fit calibration factors from per-op tables or end-to-end measurements"),
    ("parse", "read an SGLang log/metrics/trace file and print the events shadowsim sees"),
    ("schema", "print the JSON Schema of shadowsim's trace events"),
    ("publish", "ship a log, metrics or trace file (or a ZMQ feed) into Kafka"),
    ("broker", "run the embedded Kafka-compatible broker (Tansu) on loopback"),
    ("run", "the live shadow: consume events, simulate every instance, export to Prometheus"),
    ("demo", "end-to-end demo on the embedded broker with emulated SGLang instances"),
]


class OneLineParser(argparse.ArgumentParser):
    """argparse errors as one line naming the command and its --help (not a screenful of usage), exit 2."""

    def error(self, message: str):  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def _load(name: str):
    return importlib.import_module(f"shadowsim.commands.{name}")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="shadowsim",
        description="Shadow simulator for SGLang serving: predict, validate and watch live servers.",
        epilog="Run `shadowsim COMMAND --help` for the options of one command. Python API: docs/api.md.",
    )
    from shadowsim import __version__

    parser.add_argument("--version", action="version", version=f"shadowsim {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=OneLineParser)
    for name, help_ in COMMANDS:
        if only is not None and name != only:
            sub.add_parser(name.replace("_", "-"), help=help_, add_help=False)
            continue
        try:
            mod = _load(name)
        except ModuleNotFoundError as exc:
            if exc.name != f"shadowsim.commands.{name}":
                raise
            continue  # command not built yet
        p = sub.add_parser(
            name.replace("_", "-"),
            help=help_,
            description=(mod.__doc__ or help_).strip(),
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        mod.add_arguments(p)
        p.set_defaults(_module=mod, _parser=p)
    return parser


def table_cache_dir() -> Path:
    """Where built latency tables are cached between runs (``$SHADOWSIM_CACHE_DIR``, else the XDG cache)."""
    root = os.environ.get("SHADOWSIM_CACHE_DIR") or Path(os.environ.get("XDG_CACHE_HOME") or
                                                         Path.home() / ".cache") / "shadowsim"
    return Path(root) / "tables"


def main(argv: list[str] | None = None) -> int:
    if argv is not None:  # a call from Python code (tests, scripts)
        return run_command(argv)
    try:  # the program itself: the console script, ``python -m shadowsim``
        return run_command(sys.argv[1:])
    finally:
        settle_for_exit()


def settle_for_exit() -> None:
    """Before the interpreter's exit tears the modules down, move every object the cyclic garbage collector tracks
    into its permanent generation (``gc.freeze``), so that the collections the teardown runs have nothing to
    traverse: ≈ 19 M instructions of a 100-request ``simulate`` process's ≈ 245 M (docs/architecture.md, Start-up,
    fifth pass). Only where the process ends with the command (``main()`` without arguments: the console script,
    ``python -m shadowsim``); output, files and exit handlers are flushed, closed and run as before, and what is
    skipped is collecting garbage cycles left at exit, whose memory the operating system takes back anyway."""
    import gc

    gc.freeze()


def run_command(argv: list[str]) -> int:
    """The command line ``argv`` (without the program's name): its exit status."""
    argv = list(argv)
    first = next((a for a in argv if not a.startswith("-")), None)
    known = {n for n, _ in COMMANDS}
    parser = build_parser(first if first in known else None)
    args, extra = parser.parse_known_args(argv)
    if getattr(args, "_module", None) is None:
        if extra:
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        parser.print_help()
        return 2
    if extra:  # the sub-command's own usage, with the closest option names
        sub: argparse.ArgumentParser = args._parser
        import difflib

        options = [o for a in sub._actions for o in a.option_strings]
        hint = difflib.get_close_matches(extra[0].split("=")[0], options, n=2)
        sub.error(f"unrecognized arguments: {' '.join(extra)}"
                  + (f" (did you mean {' or '.join(hint)}?)" if hint else ""))
    from simcore.perf.tables import use_cache_dir  # only when a command runs: keeps --help free of numpy

    use_cache_dir(table_cache_dir())
    try:
        return int(args._module.run(args) or 0)
    except UserError as exc:  # one line naming the field and what to do; no traceback
        print(f"shadowsim: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
    except UnicodeDecodeError as exc:  # a binary file where text was expected, whichever reader met it
        print(f"shadowsim: error: input: not a UTF-8 text file (byte 0x{exc.object[exc.start]:02x} at offset "
              f"{exc.start}) (give the text file the option expects)", file=sys.stderr)
        return 2
    except Exception as exc:  # last resort: still one line; SHADOWSIM_DEBUG=1 shows the traceback
        import os

        if os.environ.get("SHADOWSIM_DEBUG"):
            raise
        print(f"shadowsim: error: internal: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''} "
              "(a bug: rerun with SHADOWSIM_DEBUG=1 and report the traceback)", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
