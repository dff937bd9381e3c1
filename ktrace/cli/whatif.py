"""``ktrace whatif``: what a change would make of a capture's wall, by replaying its timeline.

    ktrace whatif BUF [--balance PHASE] [--straggler-to-median PHASE] [--no-late-start] [--block N]
                      [--barrier-cost NS] [--spread PHASE] [--speedup PHASE=FACTOR]
                      [--group-speedup GROUP=FACTOR] [--block-speedup BLOCK=FACTOR] [--json]
    ktrace whatif BUF --fix N|all      # the change that removes warning N's cause (analyze's numbering)

Exit codes: 0 ok, 2 bad input (no change given, a phase the capture lacks, a trace instead of a buffer, a warning
number the report does not have).
"""

from __future__ import annotations

import json

from ..core.errors import EXIT_OK, InputError
from ._common import decode_kwargs, decode_options
from .formats import emit, format_options

__all__ = ["register", "HANDLERS"]


def register(sub) -> None:
    w = sub.add_parser(
        "whatif", help="predict the wall of a change: balance a phase, no late start, a cheaper barrier, ...",
        description="Replay the capture's timeline (each slice begins at the later of its lane's previous end "
        "plus its own gap and the release it waited for: a grid or cluster barrier, another warp group's hand-off, "
        "a freed SM slot) with the change applied, and print the measured wall, the predicted wall, the saving "
        "and the critical path after the change (docs/analysis-schema.md, 'Cause model and replay').",
        epilog="Changes combine. The prediction keeps everything else as measured: each lane's own gaps, each "
        "barrier's release latency, the other phases' durations.")
    w.add_argument("source", metavar="BUF", help="a profiler buffer (.bin, .bin.gz, .npy) with its sidecar")
    w.add_argument("--fix", metavar="N", help="replay the change that removes the cause of warning N of `ktrace analyze "
                   "BUF` (its stake is that change's saving); N1,N2 or all: those warnings' changes together")
    w.add_argument("--balance", metavar="PHASE", action="append", default=[],
                   help="every lane gets the phase's mean: each instance's mean slice (a work list: each lane's total "
                   "of the phase the lanes' mean); repeatable")
    w.add_argument("--straggler-to-median", metavar="PHASE", action="append", default=[],
                   help="slices longer than their instance's median get the median (with --block: that block's only)")
    w.add_argument("--no-late-start", action="store_true",
                   help="lanes whose first slice began after their group's median first begin begin at the median "
                   "(with --block: that block only, and before every later instance too: no longer than the instance's median "
                   "after its release or its own previous slice)")
    w.add_argument("--block", type=_block, metavar="N",
                   help="limit --straggler-to-median and --no-late-start to block N (0 to the blocks' count - 1)")
    w.add_argument("--barrier-cost", type=_ns, metavar="NS",
                   help="every grid or cluster barrier's release (last arrival to each lane's next begin) at most NS")
    w.add_argument("--barrier-own-only", action="store_true",
                   help="with --barrier-cost: cut only each barrier's own release (its median); a lane that began "
                   "later keeps its excess (its own delay, not the barrier's)")
    w.add_argument("--spread", metavar="PHASE", action="append", default=[],
                   help="a phase run by a few lanes while the others idle, spread over all the lanes of its warp "
                   "groups (each slice lasts its share)")
    w.add_argument("--speedup", metavar="PHASE=FACTOR", type=_speedup, action="append", default=[],
                   help="the phase's slices FACTOR times as fast (0.5: twice as slow), FACTOR from 0.001 to 1000; "
                   "repeatable")
    w.add_argument("--blocks", type=_blocks, metavar="N",
                   help="the same total work in N equal blocks, scheduled into the measured slots (a resized grid)")
    w.add_argument("--per-sm", type=_per_sm, metavar="K",
                   help="with --blocks: K blocks resident per SM (default: the measured residency)")
    w.add_argument("--group-speedup", metavar="GROUP=FACTOR", type=_group_speedup, action="append", default=[],
                   help="every slice of warp group GROUP FACTOR times as fast; repeatable")
    w.add_argument("--wait-phases", metavar="NAMES", type=_names,
                   help="phases nested in the lanes' work that time a wait (comma-separated), read as waits released "
                   "by the lane they wait for, beside those whose names say so (mma_wait, tma-wait)")
    w.add_argument("--block-speedup", metavar="BLOCK=FACTOR", type=_block_speedup, action="append", default=[],
                   help="every slice of block BLOCK FACTOR times as fast (a slow GPC's blocks as fast as the others'); "
                   "repeatable")
    format_options(w, "the prediction")
    decode_options(w)


# The range of a --speedup factor: a phase 1000 times as fast, or as slow, is beyond any one change to a kernel,
# and within it every predicted time stays a finite, whole number of ns (a factor of 1e-300 would make a wall of
# 300 digits; 1e-308, one that is not a number at all).
MIN_SPEEDUP, MAX_SPEEDUP = 1e-3, 1e3
MAX_BARRIER_NS = 10**12  # a barrier's release of 1000 s: past any one kernel's wall, so as good as no cap


def _ns(text: str) -> float:
    import argparse

    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{_quoted(text)} is not a number of ns") from None
    if not 0 <= v <= MAX_BARRIER_NS:
        raise argparse.ArgumentTypeError(f"{_quoted(text)}: give a finite number of ns, 0 or more, at most "
                                         f"{MAX_BARRIER_NS:.0e}")
    return v


def _block(text: str) -> int:
    import argparse

    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{_quoted(text)} is not a block's index (0, 1, 2, ...)") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"{_quoted(text)}: a block's index is 0 or more (blocks count from 0)")
    return v


MAX_BLOCKS = 1 << 22  # a resized grid of at most 4M blocks: the lanes a capture may hold past which its header is checked
MAX_PER_SM = 64       # blocks resident on one SM: every NVIDIA GPU so far allows at most 32


def _whole(text: str, what: str, top: int) -> int:
    import argparse

    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{_quoted(text)} is not a whole number of {what}") from None
    if not 1 <= v <= top:
        raise argparse.ArgumentTypeError(f"{_quoted(text)}: give from 1 to {top:,} {what}")
    return v


def _blocks(text: str) -> int:
    return _whole(text, "blocks", MAX_BLOCKS)


def _per_sm(text: str) -> int:
    return _whole(text, "blocks per SM", MAX_PER_SM)


def _quoted(text: str) -> str:
    from ..core.terminal import excerpt

    return f"'{excerpt(text, 40)}'"


def _speedup(text: str, what: str = "PHASE") -> tuple[str, float]:
    import argparse

    phase, sep, factor = text.rpartition("=")
    try:
        f = float(factor)
    except ValueError:
        f = float("nan")
    if not sep or not phase or f != f:
        raise argparse.ArgumentTypeError(f"{_quoted(text)}: give PHASE=FACTOR, e.g. compute=1.5")
    if not MIN_SPEEDUP <= f <= MAX_SPEEDUP:
        raise argparse.ArgumentTypeError(f"{_quoted(text)}: give {what}=FACTOR with a factor above 0, from "
                                         f"{MIN_SPEEDUP:g} to {MAX_SPEEDUP:g} (1.5: half as fast again, 0.5: twice "
                                         "as slow)")
    return phase, f


def _group_speedup(text: str) -> tuple[int, float]:
    import argparse

    group, factor = _speedup(text, "GROUP")
    if not group.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r}: give GROUP=FACTOR with a warp group's number, e.g. 1=1.5")
    return int(group), factor


def _names(text: str) -> tuple[str, ...]:
    import argparse

    names = tuple(n.strip() for n in text.split(","))
    if not all(names):
        raise argparse.ArgumentTypeError(f"{_quoted(text)}: give phase names separated by commas, e.g. spin,poll")
    return names


def _block_speedup(text: str) -> tuple[int, float]:
    import argparse

    block, factor = _speedup(text, "BLOCK")
    if not block.isdigit():
        raise argparse.ArgumentTypeError(f"{_quoted(text)}: give BLOCK=FACTOR with a block's index, e.g. 17=1.5")
    return int(block), factor


def _cmd_whatif(a) -> int:
    from ..analysis.replay.change import Change
    from ..api import whatif
    from ..report.whatif_report import whatif_text

    change = Change(balance=tuple(a.balance), straggler_to_median=tuple(a.straggler_to_median),
                    no_late_start=a.no_late_start, block=a.block, barrier_cost_ns=a.barrier_cost,
                    barrier_own_only=a.barrier_own_only, spread=tuple(a.spread), speedup=tuple(a.speedup),
                    group_speedup=tuple(a.group_speedup), block_speedup=tuple(a.block_speedup), blocks=a.blocks,
                    per_sm=a.per_sm)
    if a.fix is not None:
        if not change.empty():
            raise InputError("whatif: --fix N replays warning N's own change: give it alone, without other changes")
        w = whatif(a.source, fix=a.fix, wait_phases=a.wait_phases or (), **decode_kwargs(a))
        emit(a, lambda: print(whatif_text(a.source, w.to_dict())),
             json=lambda: json.dumps({"source": a.source, **w.to_dict()}, indent=2, ensure_ascii=False))
        return EXIT_OK
    if a.per_sm is not None and a.blocks is None:
        raise InputError("whatif: --per-sm K qualifies --blocks N; give it too")
    if a.blocks is not None and Change(blocks=a.blocks, per_sm=a.per_sm) != change:
        raise InputError("whatif: --blocks N is a resized grid: give it alone (with --per-sm K at most)")
    if a.barrier_own_only and a.barrier_cost is None:
        raise InputError("whatif: --barrier-own-only qualifies --barrier-cost NS; give it too")
    if a.block is not None and not (a.straggler_to_median or a.no_late_start):
        raise InputError("whatif: --block limits --straggler-to-median or --no-late-start; give one of them")
    if change.empty():
        raise InputError("whatif: give a change: --fix N (a warning of ktrace analyze), --balance PHASE, "
                         "--straggler-to-median PHASE, --no-late-start, --barrier-cost NS, --spread PHASE, "
                         "--speedup PHASE=FACTOR, --group-speedup GROUP=FACTOR, --block-speedup BLOCK=FACTOR or --blocks N")
    w = whatif(a.source, change, wait_phases=a.wait_phases or (), **decode_kwargs(a))
    emit(a, lambda: print(whatif_text(a.source, w.to_dict())),
         json=lambda: json.dumps({"source": a.source, **w.to_dict()}, indent=2, ensure_ascii=False))
    return EXIT_OK


HANDLERS = {"whatif": _cmd_whatif}
