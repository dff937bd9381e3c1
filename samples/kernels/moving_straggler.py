"""Persistent kernel with a software grid barrier and a slow block that moves every iteration.

    ktrace run samples/kernels/moving_straggler.py

As imbalance.py, but the block with 3x the compute is (17 + 37 * iteration) mod blocks: the last
'compute' finisher changes every iteration (the method's 'moving' case: contention or synchronization,
not one block's share of the work).
"""

from persistent_common import run_persistent

if __name__ == "__main__":
    run_persistent(
        "moving_straggler", 17, 37,
        "Persistent grid, one block per SM, 8 iterations of load/compute/reduce with a software grid barrier "
        "after each phase (waits outside the probes). In iteration i the block (17 + 37*i) mod blocks gets 3x "
        "the compute, so the last 'compute' finisher moves every iteration.",
    )
