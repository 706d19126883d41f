"""Print the JSON Schema (draft 2020-12) of shadowsim's trace events: one union discriminated by "kind", each
event frozen, unknown fields rejected, every event carrying schema_version, kind, instance_id, ts (Unix s), source
and event_id. Units are in the field names (_s seconds, _ts Unix seconds, _tokens tokens, _tok_s tokens/second);
docs/events.md documents every field and which wire format fills it.

Examples:
  shadowsim schema > events.schema.json
  shadowsim schema --kind prefill_batch
  shadowsim schema --list
"""
from __future__ import annotations

import argparse
import json

from shadowsim.errors import UserError
from simcore.events import EVENT_KINDS, KIND_TO_CLASS, event_json_schema


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kind", default=None, metavar="KIND",
                        help=f"only this event kind ({', '.join(EVENT_KINDS)})")
    parser.add_argument("--list", action="store_true", help="list the event kinds, one per line")
    parser.add_argument("--compact", action="store_true", help="one line instead of indented JSON")


def run(args: argparse.Namespace) -> int:
    if args.list:
        for k in EVENT_KINDS:
            doc = (KIND_TO_CLASS[k].__doc__ or "").strip().split("\n")[0]
            print(f"{k:<20} {doc}")
        return 0
    if args.kind is not None:  # shadowsim.cli turns a UserError into the one-line error and exit 2
        cls = KIND_TO_CLASS.get(args.kind)
        if cls is None:
            raise UserError("--kind", f"unknown event kind {args.kind!r}", f"choose one of {', '.join(EVENT_KINDS)}")
        schema = cls.model_json_schema()
    else:
        schema = event_json_schema()
    print(json.dumps(schema, sort_keys=True, separators=(",", ":")) if args.compact
          else json.dumps(schema, indent=2, sort_keys=True))
    return 0
