"""The memory report: text, JSON and PNG agree; the CLI writes all three."""
from __future__ import annotations

import json
from pathlib import Path

from sequant_eval.cli import main
from sequant_eval.report.text import format_bytes

DATA = Path(__file__).resolve().parents[2] / "data" / "water20"


def test_report_cli_text_json_png(tmp_path, capsys):
    out_json, out_png = tmp_path / "r.json", tmp_path / "r.png"
    rc = main([
        "report", str(DATA / "csv_ccsd_doubles_residual_df.txt"),
        "--regime", str(DATA / "regime.json"), "--budget", "25GB",
        "--contracted", "Κ", "--external", "i", "--block", "Κ=256,i=16",
        "--json", str(out_json), "--plot", str(out_png)])
    assert rc == 0
    text = capsys.readouterr().out
    data = json.loads(out_json.read_text(encoding="utf-8"))
    for key in ("peak_bytes", "budget_bytes", "flops", "binding_point"):
        assert key in data
    assert data["budget_bytes"] == 25e9 and data["peak_bytes"] <= 25e9
    assert f"({data['peak_bytes']} B)" in text
    assert format_bytes(data["peak_bytes"]) in text
    assert f"point {data['binding_point']}:" in text
    assert f"{data['recompute_overhead']:.4f}x" in text
    assert len(data["live_bytes"]) > 0 and max(data["live_bytes"]) == data["peak_bytes"]
    assert out_png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out_png.stat().st_size > 10_000


def test_report_budget_accepts_human_units(tmp_path, capsys):
    rc = main(["report", str(DATA / "csv_ccsd_energy_df.txt"), "--regime",
               str(DATA / "regime.json"), "--budget", "25e9", "--json", str(tmp_path / "x.json")])
    assert rc == 0
    assert json.loads((tmp_path / "x.json").read_text())["budget_bytes"] == 25e9
