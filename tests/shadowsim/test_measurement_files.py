"""shadowsim.measurement_files: the CSV writer and the --check of the validation/ builders."""
from pathlib import Path

from shadowsim.measurement_files import render_csv, write_or_check


def test_render_csv_fills_missing_fields_and_keeps_order():
    text = render_csv(["id", "tp", "server_args"], [{"id": "a", "tp": 8}, {"tp": 4, "id": "b", "server_args": "--x"}])
    assert text == "id,tp,server_args\na,8,\nb,4,--x\n"


def test_check_reports_a_stale_file_and_writes_nothing(tmp_path: Path, capsys):
    out = tmp_path / "rows.csv"
    out.write_text("old\n")
    assert write_or_check([(out, "new\n")], check=True, rebuild="python validation/build_x.py") == 1
    assert out.read_text() == "old\n"
    assert "rows.csv is stale: rerun python validation/build_x.py" in capsys.readouterr().err
    assert write_or_check([(out, "new\n")], check=False, rebuild="") == 0
    assert out.read_text() == "new\n"
    assert write_or_check([(out, "new\n")], check=True, rebuild="") == 0


def test_check_fails_on_a_missing_file(tmp_path: Path):
    assert write_or_check([(tmp_path / "absent.csv", "x\n")], check=True, rebuild="make it") == 1
