"""The recording rules and the Grafana dashboard drivelab ships: the rules pass promtool
(as the role checks them before they replace the old ones), and every dashboard panel asks
only for series the rules record or drivelab's live exporter serves. That each of them
returns series from a real Prometheus after a run is the lab's to show
(tests/lab/test_telemetry.py)."""

from __future__ import annotations

import json
import re
import subprocess

import yaml

from collector.live.exporter import GAUGES
from collector.paths import REPO

ROLE = REPO / "roles" / "prometheus_server"
RULES = ROLE / "files" / "drivelab-rules.yml"
DASHBOARD = ROLE / "files" / "grafana" / "drivelab.json"


def test_the_rules_pass_promtool():
    proc = subprocess.run(
        ["promtool", "check", "rules", str(RULES)], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS: 12 rules found" in proc.stdout


def test_every_panel_asks_for_recorded_or_served_series():
    records = {r["record"] for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]}
    served = {name for name, _, _ in GAUGES} | {"drivelab_client_up", "drivelab_client_status"}
    doc = json.loads(DASHBOARD.read_text())
    assert doc["uid"] == "drivelab-live" and doc["panels"]
    for panel in doc["panels"]:
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            # the series names: before a selector's brace, or a name alone
            names = set(re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*(?=\{|\s*$|\s+\+)", target["expr"]))
            assert names and names <= records | served, (panel["title"], names)
