"""The imbalance kernel with its straggler's extra work spread over every block: the "after" of imbalance.py.

    ktrace run samples/kernels/balanced.py

Same kernel (persistent.cu, persistent_phases), grid and phases as imbalance.py. There, block 17 does 3x the
compute (2 x 8000 extra FMAs per thread per iteration); here those extra FMAs are shared by all blocks
(8000 + 16000 / blocks each, so the same total to within rounding), so no block finishes 'compute' late and
nobody waits at the barrier after it. ``ktrace diff imbalance_ktrace.bin balanced_ktrace.bin`` shows the fix.
"""

from persistent_common import run_persistent

if __name__ == "__main__":
    run_persistent(
        "balanced", 17, 0,
        "Persistent grid, one block per SM (large dynamic shared memory), 128 threads, 8 iterations of "
        "load/compute/reduce, each phase followed by a software grid barrier whose wait is outside the probes. "
        "The work imbalance.py gives block 17 on top of everyone's (2x the base compute) is spread evenly over "
        "all blocks instead: every block does base + 2*base/blocks FMAs per thread, the same total, and no "
        "block is a straggler.",
        spread=True,
    )
