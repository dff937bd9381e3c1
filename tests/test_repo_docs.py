"""What the repository says about itself stays true: the captures samples/kernels/README.md lists are committed,
and CI installs only what the tests need (no system upgrade)."""

from __future__ import annotations

import re

from conftest import ROOT

KERNELS_README = ROOT / "samples" / "kernels" / "README.md"


def test_every_capture_the_drivers_table_lists_is_in_samples():
    rows = [line for line in KERNELS_README.read_text().splitlines() if line.startswith("| `") and ".py`" in line]
    assert len(rows) >= 15
    for row in rows:
        last = row.rstrip(" |").split(" | ")[-1]
        assert "not yet" not in last, row[:80]
        for stem in re.findall(r"`(\w+)_\*`", last):
            assert sorted((ROOT / "samples").glob(f"{stem}_*")), f"{stem}_*: listed, not in samples/"


def test_ci_installs_chromium_alone_and_upgrades_nothing():
    script = (ROOT / ".ci" / "run").read_text()
    apt = [line for line in script.splitlines() if "apt-get" in line and not line.lstrip().startswith("#")]
    assert apt
    assert not re.search(r"apt-get\s+(-\S+\s+)*(dist-|full-)?upgrade\b", script)
    install = re.search(r"apt-get install ([^)\n]*)", script).group(1).split()
    assert "--no-upgrade" in install and "--no-install-recommends" in install and install[-1] == "chromium"
