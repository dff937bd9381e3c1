"""balanced.py's kernel with a little more compute per block: a change of about 1% for an A/B session.

    ktrace run --ab samples/kernels/more_work.py "samples/kernels/more_work.py --extra-work 2 --name more_work2"

Same kernel (persistent.cu, persistent_phases), grid and phases as balanced.py (no straggler); --extra-work PCT
gives every block PCT percent more dependent FMAs in 'compute' (8121 per thread per iteration on an H200 at 0).
'compute' is a little over half of the kernel's time there, so 2% more compute is about 1% more kernel time:
a change that separate sessions (1-2.5% apart from one H200 to another) cannot see and a paired one can.
"""

from persistent_common import run_persistent

if __name__ == "__main__":
    run_persistent(
        "more_work", 17, 0,
        "Persistent grid, one block per SM (large dynamic shared memory), 128 threads, 8 iterations of "
        "load/compute/reduce, each phase followed by a software grid barrier whose wait is outside the probes. "
        "As balanced.py (every block the same compute, no straggler), with --extra-work PCT percent more "
        "compute in every block (compute_extra_work_pct).",
        spread=True, extra_work=True,
    )
