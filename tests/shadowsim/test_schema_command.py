"""``shadowsim schema``: the JSON Schema of the event union, usable to validate what ``parse`` prints."""
from __future__ import annotations

import json

from shadowsim.cli import main
from simcore.events import EVENT_KINDS


def test_schema_is_valid_json_with_every_kind(capsys):
    assert main(["schema"]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert set(schema["discriminator"]["mapping"]) == set(EVENT_KINDS)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"


def test_schema_of_one_kind_and_unknown_kind(capsys):
    assert main(["schema", "--kind", "decode_batch", "--compact"]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and json.loads(out)["properties"]["kind"]["const"] == "decode_batch"
    assert main(["schema", "--kind", "nope"]) == 2
    assert "unknown event kind 'nope'" in capsys.readouterr().err


def test_schema_list(capsys):
    assert main(["schema", "--list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == list(EVENT_KINDS)


def test_what_parse_prints_validates_against_the_printed_schema(shared_dir, capsysbinary):
    import jsonschema  # shipped with check-jsonschema (test extra)

    assert main(["schema"]) == 0
    schema = json.loads(capsysbinary.readouterr().out)
    validator = jsonschema.Draft202012Validator(schema)
    f = shared_dir / "data/sglang_logs/dgx-spark_newest_laguna-int4_dflash-spec_swa_gb10.log"
    assert main(["parse", str(f)]) == 0
    lines = capsysbinary.readouterr().out.splitlines()
    assert len(lines) == 118
    for line in lines:
        validator.validate(json.loads(line))
    bad = json.loads(lines[-1])
    bad["running_reqs"] = -1
    assert not validator.is_valid(bad)
