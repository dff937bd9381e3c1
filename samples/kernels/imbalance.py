"""Persistent kernel with a software grid barrier and one slow block.

    ktrace run samples/kernels/imbalance.py

One block per SM, 8 iterations of load / compute / reduce, a grid barrier after each phase (its wait
outside the probes). Block 17 gets 3x the compute every iteration: it is the last finisher of every
'compute' instance, and every other block waits for it at the next barrier.
"""

from persistent_common import run_persistent

SLOW_BLOCK = 17

if __name__ == "__main__":
    run_persistent(
        "imbalance", SLOW_BLOCK, 0,
        f"Persistent grid, one block per SM (large dynamic shared memory), 128 threads, 8 iterations of "
        f"load/compute/reduce, each phase followed by a software grid barrier whose wait is outside the probes. "
        f"Block {SLOW_BLOCK} gets 3x the compute work every iteration, so it is the last 'compute' finisher of "
        f"every iteration and the other blocks wait for it at the following barrier.",
    )
