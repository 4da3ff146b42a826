"""A target from outside the tree trains end to end through `trainctl`: its own per-language settings reach its own
launcher, its runs are stored under its own bucket scheme, and nothing of it is left running; installed by its
package and one registry line (tests/support/plugin_target.py)."""

from __future__ import annotations

import json

from tests.support.plugin_target import shelf_env, trainctl_with_shelf
from tests.support.project import SAMPLE, TINY_SETS


def test_a_target_from_outside_the_tree_trains_with_its_settings_launcher_and_storage(project, tmp_path):
    shelf = shelf_env(project, tmp_path / "shelf")
    push = trainctl_with_shelf(project, "data", "push", "fr", str(SAMPLE / "fr"), "--env", "shelf")
    assert push.returncode == 0, push.stdout + push.stderr

    r = trainctl_with_shelf(project, "train", "fr", "--env", "shelf", *TINY_SETS, "--set", "languages.fr.shelf.nice=5")
    assert r.returncode == 0, r.stdout + r.stderr
    [run] = (shelf / "fr" / "runs").iterdir()
    assert (run / "model.pth").is_file() and json.loads((run / "metrics.json").read_text())["run_id"] == run.name
    assert f"shelf://{run}/model.pth" in r.stdout and "nothing left running" in r.stdout

    launched = json.loads((project / ".trainstack/shelf/procs" / run.name / "launched.json").read_text())
    assert launched["nice"] >= 5 and launched["args"][launched["args"].index("--bucket") + 1] == f"shelf://{shelf}"
    meta = json.loads((run / "metadata" / "trainctl.json").read_text())
    assert meta["target"] == "shelf" and not {"machine_type", "gpu", "zone"} & set(meta), meta

    runs = trainctl_with_shelf(project, "runs", "--env", "shelf", "--json")
    assert runs.returncode == 0 and json.loads(runs.stdout)[0]["state"] == "SUCCEEDED", runs.stdout + runs.stderr
