#!/usr/bin/env python3
"""Captures of FlashInfer's own instrumented kernels on an H200 (FlashInfer 0.7.4, torch): the persistent
BatchAttention and the Hopper MLA decode kernel, each workload with 5 runs of the same inputs, the unprofiled
module's timing, every plan() argument, and the planner's per-CTA work lists read from the wrapper's pinned
host copy of its int workspace (include/flashinfer/attention/scheduler.cuh: HolisticPlanInfo<2>, MLAPlanInfo).

    scripts/capture_flashinfer.sh [RESULTS_DIR]      # the set-up (FlashInfer subset, env) and then this script

    python3 scripts/capture_flashinfer.py --results DIR [--only NAME ...] [--compress]

First the JIT modules are built, profiled and unprofiled, in parallel processes (this script with --build),
with `ktrace calibrate` beside them when PyCUDA is there (the sidecars then carry the timer tick). Files go to
DIR/samples (NAME_runK.bin + NAME_runK.json); DIR/summary.json holds the table printed at the end.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import subprocess
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

BA_EVENTS = ["prefill", "decode", "reduction"]
MLA_EVENTS = ["issue-load-q", "issue-load-kv", "write-o", "softmax-update", "gemm-qk", "gemm-pv", "rescale-o",
              "write-p-smem", "split-k"]
MLA_GROUPS = ["load", "compute"]  # warp group 0: producer (loads q and kv, also computes pv); 1: consumer

# name -> (kernel, workload). BatchAttention: (kv_len, qo_len) per request; MLA: kv_len per request (qo_len 1).
WORKLOADS = {
    # FlashInfer's profiler/batch_attention.py: 122 short decode-ish requests and 8 long prefill chunks
    "fi_batch_attention_example": ("ba", dict(requests=[(600, 1)] * 122 + [(10000, 17)] * 8, page_size=1,
                                             num_kv_heads=4, num_qo_heads=28, head_dim=128, causal=True)),
    # 132 equal decode requests x 4 KV heads = 528 work items: 2 on each of the 264 CTAs, none split
    "fi_batch_attention_decode": ("ba", dict(requests=[(4096, 1)] * 132, page_size=1, num_kv_heads=4,
                                            num_qo_heads=28, head_dim=128, causal=True)),
    # 128 short decode requests and 2 very long ones: the long ones are split across CTAs and reduced
    "fi_batch_attention_mixed": ("ba", dict(requests=[(1024, 1)] * 128 + [(65536, 1)] * 2, page_size=1,
                                           num_kv_heads=4, num_qo_heads=28, head_dim=128, causal=True)),
    # FlashInfer's profiler/mla.py defaults: 64 requests of 1024 over 66 clusters (2 clusters get nothing)
    "fi_mla_example": ("mla", dict(kv_lens=[1024] * 64, num_heads=128, page_size=1)),
    # 132 equal requests over 66 clusters of 2 CTAs: 2 work items per cluster, none split
    "fi_mla_decode": ("mla", dict(kv_lens=[1024] * 132, num_heads=128, page_size=1)),
    # 128 short requests and 4 long ones: split-KV for the long ones, and a merge (split-k) step
    "fi_mla_mixed": ("mla", dict(kv_lens=[1024] * 128 + [16384] * 4, num_heads=128, page_size=1)),
}


def log(msg: str) -> None:
    print(msg, flush=True)


# -- inputs and wrappers --------------------------------------------------------------------------------------
def ba_inputs(w, torch, dev):
    kv_lens = [k for k, _ in w["requests"]]
    qo_lens = [q for _, q in w["requests"]]
    ps = w["page_size"]
    pages = [math.ceil(k / ps) for k in kv_lens]
    qo_indptr = torch.tensor([0] + list(_cumsum(qo_lens)), dtype=torch.int32)
    kv_indptr = torch.tensor([0] + list(_cumsum(pages)), dtype=torch.int32)
    n_pages = int(kv_indptr[-1])
    g = torch.Generator(device=dev).manual_seed(0)
    q = torch.rand(int(qo_indptr[-1]), w["num_qo_heads"], w["head_dim"], device=dev, dtype=torch.bfloat16,
                   generator=g)
    kv = torch.randn(n_pages, 2, ps, w["num_kv_heads"], w["head_dim"], device=dev, dtype=torch.bfloat16,
                     generator=g)
    plan = dict(qo_indptr=qo_indptr.to(dev), kv_indptr=kv_indptr.to(dev),
                kv_indices=torch.arange(n_pages, dtype=torch.int32, device=dev),
                kv_len_arr=torch.tensor(kv_lens, dtype=torch.int32, device=dev),
                num_qo_heads=w["num_qo_heads"], num_kv_heads=w["num_kv_heads"], head_dim_qk=w["head_dim"],
                head_dim_vo=w["head_dim"], page_size=ps, causal=w["causal"], q_data_type=torch.bfloat16,
                kv_data_type=torch.bfloat16)
    return plan, (q, kv), dict(qo_lens=qo_lens, kv_lens=kv_lens, kv_layout="NHD")


def ba_wrappers(plan, tensors, use_profiler_both=(True, False)):
    import flashinfer

    out = []
    for prof in use_profiler_both:
        wr = flashinfer.BatchAttention(kv_layout="NHD")
        wr.plan(**plan, use_profiler=prof)
        out.append(wr)
    return out


def mla_inputs(w, torch, dev):
    try:
        from flashinfer.mla import MLAPlanMetadata
    except ImportError:
        from flashinfer.mla._batch_mla._contracts import MLAPlanMetadata

    kv_lens, H, ps = w["kv_lens"], w["num_heads"], w["page_size"]
    B = len(kv_lens)
    pages = [math.ceil(k / ps) for k in kv_lens]
    n_pages = sum(pages)
    g = torch.Generator(device=dev).manual_seed(0)
    dt = torch.float16
    q_nope = torch.randn(B, H, 512, dtype=dt, device=dev, generator=g)
    q_pe = torch.randn(B, H, 64, dtype=dt, device=dev, generator=g)
    ckv = torch.randn(n_pages, ps, 512, dtype=dt, device=dev, generator=g)
    kpe = torch.randn(n_pages, ps, 64, dtype=dt, device=dev, generator=g)
    qo_indptr = torch.arange(B + 1, dtype=torch.int32, device=dev)
    kv_indptr = torch.tensor([0] + list(_cumsum(pages)), dtype=torch.int32, device=dev)
    kv_indices = torch.arange(n_pages, dtype=torch.int32, device=dev)
    kv_len_arr = torch.tensor(kv_lens, dtype=torch.int32, device=dev)
    meta = MLAPlanMetadata.csr(qo_indptr, kv_indptr, kv_indices, kv_len_arr)
    plan = dict(metadata=meta, num_heads=H, head_dim_ckv=512, head_dim_kpe=64, page_size=ps, causal=False,
                sm_scale=1.0 / math.sqrt(512 + 64), q_data_type=dt, kv_data_type=dt, query_layout="split",
                kv_cache_layout="split")
    facts = dict(qo_indptr=qo_indptr, kv_indptr=kv_indptr, kv_indices=kv_indices, kv_len_arr=kv_len_arr)
    return plan, ((q_nope, q_pe), (ckv, kpe)), dict(qo_lens=[1] * B, kv_lens=kv_lens), facts


def mla_wrappers(plan, use_profiler_both=(True, False)):
    import torch
    from flashinfer.mla import BatchMLAPagedAttentionWrapper

    out = []
    for prof in use_profiler_both:
        ws = torch.empty(128 * 1024 * 1024, dtype=torch.int8, device="cuda")
        wr = BatchMLAPagedAttentionWrapper(ws, backend="fa3")
        wr.plan(**plan, use_profiler=prof)
        out.append(wr)
    return out


def kernel_work(kind: str, w: dict) -> dict:
    """The sidecar's ``work`` from the plan: the KV cache bytes the kernel reads (each request's KV read once:
    a lower bound on the bytes it moves, so the roofline's floor never overstates). MLA: kv tokens x (512 ckv +
    64 kpe) x 2 bytes (fp16); BatchAttention: kv tokens x kv heads x head_dim x 2 (K and V) x 2 bytes (bf16)."""
    if kind == "mla":
        return {"bytes": sum(w["kv_lens"]) * (512 + 64) * 2}
    kv_tokens = sum(k for k, _ in w["requests"])
    return {"bytes": kv_tokens * w["num_kv_heads"] * w["head_dim"] * 2 * 2}


def _cumsum(xs):
    s = 0
    for x in xs:
        s += x
        yield s


def plan_record(plan: dict, extra: dict) -> dict:
    """Every plan() argument as JSON: tensors by dtype, shape and (small ones) values; the request lengths."""
    out = {}
    for k, v in plan.items():
        if hasattr(v, "qo_indptr") and hasattr(v, "kv_len_arr"):  # MLAPlanMetadata: the CSR form
            out[k] = {"form": "MLAPlanMetadata.csr", **{f: _tensor_record(getattr(v, f)) for f in
                                                        ("qo_indptr", "kv_indptr", "kv_indices", "kv_len_arr")}}
        elif hasattr(v, "shape") and hasattr(v, "dtype"):
            out[k] = _tensor_record(v)
        else:
            out[k] = str(v) if not isinstance(v, (int, float, bool, str, type(None))) else v
    out.update(extra)
    return out


def _tensor_record(t) -> dict:
    d = {"dtype": str(t.dtype), "shape": list(t.shape)}
    if t.numel() <= 4096:
        d["values"] = [int(x) for x in t.flatten().tolist()]
    else:  # an arange (kv_indices): say so instead of listing it
        import torch

        d["arange"] = bool(torch.equal(t.flatten().cpu().long(), torch.arange(t.numel())))
    return d


# -- the planner's work lists ---------------------------------------------------------------------------------
def _i32(np, raw, offset, n):
    return np.frombuffer(raw, dtype=np.int32, count=int(n), offset=int(offset)).astype(np.int64)


def _cta_summary(np, work_indptr, kv_start, kv_end, cost_per_item):
    """Per CTA (or cluster): items, KV tokens and planner cost (scheduler.cuh's cost_function) of its list."""
    n = len(work_indptr) - 1
    items = np.diff(work_indptr)
    chunk = kv_end - kv_start
    kv_tok = np.array([int(chunk[work_indptr[c]:work_indptr[c + 1]].sum()) for c in range(n)], dtype=np.int64)
    cost = np.array([float(cost_per_item[work_indptr[c]:work_indptr[c + 1]].sum()) for c in range(n)])
    return items, kv_tok, cost


def ba_plan_truth(wr, qo_lens, kv_lens, num_kv_heads, gqa):
    """HolisticPlanInfo<2>: [nbx, nby, 10 offsets per task (prefill, decode), len_kv_chunk, partial_o, partial_lse,
    merge_indptr, merge_o_indices, num_qo_len]; int32 arrays in the pinned copy of the int workspace."""
    import numpy as np

    info = [int(x) for x in wr._plan_info]
    nbx, nby = info[0], info[1]
    raw = wr.page_locked_int_workspace_buffer.numpy().tobytes()
    qo_indptr = np.concatenate([[0], np.cumsum(qo_lens)])
    tile_q = (128, 16)
    tasks = {}
    per_cta_tok = np.zeros(nby, dtype=np.int64)
    per_cta_cost = np.zeros(nby)
    per_cta_items = np.zeros(nby, dtype=np.int64)
    for t, tname in enumerate(("prefill", "decode")):
        base = 2 + 10 * t
        wi = _i32(np, raw, info[base + 9], nby + 1)
        total = int(wi[-1])
        if total == 0:
            tasks[tname] = {"work_items": 0}
            continue
        arr = {k: _i32(np, raw, info[base + j], total) for j, k in enumerate(
            ("q_indptr", "kv_indptr", "partial_indptr", "q_len", "kv_len", "q_start", "kv_start", "kv_end",
             "kv_head"))}
        req = np.searchsorted(qo_indptr, arr["q_indptr"], side="right") - 1
        cost = 2.0 * tile_q[t] + (arr["kv_end"] - arr["kv_start"])  # cost_function(cluster_tile_q, chunk)
        items, tok, c = _cta_summary(np, wi, arr["kv_start"], arr["kv_end"], cost)
        split = arr["kv_end"] - arr["kv_start"] < arr["kv_len"]
        per_cta_tok += tok
        per_cta_cost += c
        per_cta_items += items
        tasks[tname] = {
            "work_items": total, "items_per_cta": items.tolist(), "kv_tokens_per_cta": tok.tolist(),
            "split_items": int(split.sum()),
            "split_requests": sorted(set(int(r) for r in req[split])),
            "work_list": {"work_indptr": wi.tolist(), "request": req.tolist(), "q_start": arr["q_start"].tolist(),
                          "kv_start": arr["kv_start"].tolist(), "kv_end": arr["kv_end"].tolist(),
                          "kv_head": arr["kv_head"].tolist()},
        }
    len_kv_chunk = _i32(np, raw, info[22], 2).tolist()
    num_split_rows = int(_i32(np, raw, info[27], 1)[0])
    mean = float(per_cta_cost.mean()) if nby else 0.0
    heavy = int(per_cta_cost.argmax()) if nby else -1
    return {
        "source": "BatchAttention planner (TwoStageHolisticPlan), read from the wrapper's pinned int workspace",
        "grid": [nbx, nby, 1], "cta_of_block": "block b = blockIdx.y (gridDim.x = 1): its work list is CTA b's",
        "kv_len_limit_per_task": {"prefill": len_kv_chunk[0], "decode": len_kv_chunk[1]},
        "rows_reduced_after_split": num_split_rows, "reduction_has_work": num_split_rows > 0,
        "tasks": tasks,
        "items_per_cta": per_cta_items.tolist(), "kv_tokens_per_cta": per_cta_tok.tolist(),
        "planned_cost_per_cta": [round(x, 1) for x in per_cta_cost.tolist()],
        "planned_cost_note": "sum over the CTA's items of cost_function(tile_q, kv chunk) = 2*tile_q + chunk "
                             "(tile_q 128 prefill, 16 decode): what the planner balanced",
        "heaviest_cta": heavy, "heaviest_cost_over_mean": round(float(per_cta_cost.max()) / mean, 4) if mean else None,
        "idle_ctas": [int(c) for c in np.flatnonzero(per_cta_items == 0)],
    }


def mla_plan_truth(wr, qo_lens, kv_lens, num_heads):
    """MLAPlanInfo: 18 int64 [nbx, nby, q_indptr, kv_indptr, partial_indptr, merge x5, q_len, kv_len, q_start,
    kv_start, kv_end, work_indptr, partial_o, partial_lse]; work list per cluster (blockIdx.y), both CTAs of a
    cluster (blockIdx.x = 0, 1) share it, each taking 64 rows of the cluster's q tile."""
    import numpy as np

    backend = wr._planned_backend
    info = [int(x) for x in backend._plan_info]
    nbx, nby = info[0], info[1]
    raw = backend._pin_memory_int_workspace_buffer.numpy().tobytes()
    wi = _i32(np, raw, info[15], nby + 1)
    total = int(wi[-1])
    arr = {k: _i32(np, raw, info[j], total) for k, j in (("q_indptr", 2), ("kv_indptr", 3), ("partial_indptr", 4),
                                                         ("q_len", 10), ("kv_len", 11), ("q_start", 12),
                                                         ("kv_start", 13), ("kv_end", 14))}
    qo_indptr = np.concatenate([[0], np.cumsum(qo_lens)])
    req = np.searchsorted(qo_indptr, arr["q_indptr"], side="right") - 1
    tile = 64 * nbx
    cost = 2.0 * tile + (arr["kv_end"] - arr["kv_start"])
    items, tok, c = _cta_summary(np, wi, arr["kv_start"], arr["kv_end"], cost)
    ms = _i32(np, raw, info[5], nbx * nby)
    me = _i32(np, raw, info[6], nbx * nby)
    merge_ctas = int(((me - ms) > 0).sum())
    split = arr["partial_indptr"] >= 0
    # per block (what the buffer's lanes are): block b = cluster * nbx + x
    blk = lambda a: np.repeat(np.asarray(a), nbx).tolist()  # noqa: E731
    mean = float(c.mean()) if nby else 0.0
    return {
        "source": "MLA planner (MLAPlan, fa3), read from the backend's pinned int workspace",
        "grid": [nbx, nby, 1], "cluster_size": nbx,
        "cta_of_block": (f"block b = blockIdx.y * {nbx} + blockIdx.x; cluster blockIdx.y = b // {nbx} owns the "
                         "work list"),
        "work_items": total, "split_items": int(split.sum()),
        "split_requests": sorted(set(int(r) for r in req[split])),
        "merge_ctas": merge_ctas, "split_k_has_work": merge_ctas > 0,
        "items_per_cluster": items.tolist(), "kv_tokens_per_cluster": tok.tolist(),
        "items_per_block": blk(items), "kv_tokens_per_block": blk(tok),
        "planned_cost_per_cluster": [round(x, 1) for x in c.tolist()],
        "planned_cost_note": "sum over the cluster's items of cost_function(cluster_tile_q, kv chunk) = "
                             f"2*{tile} + chunk: what the planner balanced",
        "heaviest_cluster": int(c.argmax()) if nby else -1,
        "heaviest_cost_over_mean": round(float(c.max()) / mean, 4) if mean else None,
        "idle_clusters": [int(x) for x in np.flatnonzero(items == 0)],
        "idle_blocks": [int(b) for b in np.flatnonzero(np.repeat(items, nbx) == 0)],
        "work_list": {"work_indptr": wi.tolist(), "request": req.tolist(), "q_start": arr["q_start"].tolist(),
                      "kv_start": arr["kv_start"].tolist(), "kv_end": arr["kv_end"].tolist()},
    }


def statements(kind: str, w: dict, truth: dict | None) -> list[str]:
    """What the workload makes true, in words (stands even where the plan could not be read)."""
    if kind == "ba":
        lens = {r for r in w["requests"]}
        s = [f"{len(w['requests'])} requests, (kv_len, qo_len) kinds: {sorted(lens)}"]
    else:
        lens = set(w["kv_lens"])
        s = [f"{len(w['kv_lens'])} decode requests, kv lengths {sorted(lens)}"]
    if len(lens) == 1:
        s.append("equal requests: no CTA should stand out as slow (each holds at most the planner's equal share)")
    else:
        s.append("a few very long requests: their KV is split across CTAs, then merged (a reduction / split-k)")
    if truth is not None:
        idle = truth.get("idle_ctas", truth.get("idle_blocks", []))
        if idle:
            s.append(f"the plan leaves {len(idle)} CTA(s) without work: {idle[:16]}")
    return s


# -- one workload ---------------------------------------------------------------------------------------------
def capture(name, kind, w, args, torch, record_runs):
    dev = torch.device("cuda")
    t0 = time.time()
    if kind == "ba":
        plan, (q, kv), extra = ba_inputs(w, torch, dev)
        prof, ctrl = ba_wrappers(plan, (q, kv))
        out_p, out_c = torch.empty_like(q), torch.empty_like(q)
        buf = torch.zeros(args.alloc, dtype=torch.uint64, device=dev)
        run_p = lambda: prof.run(q, kv, out=out_p, profiler_buffer=buf)  # noqa: E731
        run_c = lambda: ctrl.run(q, kv, out=out_c)  # noqa: E731
        events, groups, ng = BA_EVENTS, [], 1
        kernel = "flashinfer BatchAttention (PersistentKernelTemplate)"
        got = lambda: ba_plan_truth(prof, extra["qo_lens"], extra["kv_lens"], w["num_kv_heads"],  # noqa: E731
                                    w["num_qo_heads"] // w["num_kv_heads"])
        got_c = lambda: ba_plan_truth(ctrl, extra["qo_lens"], extra["kv_lens"], w["num_kv_heads"],  # noqa: E731
                                      w["num_qo_heads"] // w["num_kv_heads"])
        gof = "1 group per CTA; thread 0 writes (PROFILER_INIT(..., group 0, 1 group, threadIdx.x == 0))"
    else:
        plan, (query, kvc), extra, _facts = mla_inputs(w, torch, dev)
        prof, ctrl = mla_wrappers(plan)
        out_p, out_c = torch.empty_like(query[0]), torch.empty_like(query[0])
        buf = torch.zeros(args.alloc, dtype=torch.uint64, device=dev)
        run_p = lambda: prof.run(query=query, kv_cache=kvc, out=out_p, profiler_buffer=buf)  # noqa: E731
        run_c = lambda: ctrl.run(query=query, kv_cache=kvc, out=out_c)  # noqa: E731
        events, groups, ng = MLA_EVENTS, MLA_GROUPS, 2
        kernel = "flashinfer BatchMLAPagedAttentionWrapper fa3 (hopper::BatchMLAPageAttentionHopperKernel)"
        got = lambda: mla_plan_truth(prof, extra["qo_lens"], extra["kv_lens"], w["num_heads"])  # noqa: E731
        got_c = lambda: mla_plan_truth(ctrl, extra["qo_lens"], extra["kv_lens"], w["num_heads"])  # noqa: E731
        gof = ("2 warp groups of 128 threads: group 0 loads q and kv (producer), group 1 computes; the first thread "
               "of each writes (PROFILER_INIT(..., warp_group_idx, 2, threadIdx.x % 128 == 0))")
    truth, problem = None, None
    try:
        truth = got()
        same = got_c()
        truth["unprofiled_plan_identical"] = (same.get("work_list") == truth.get("work_list")
                                              and same.get("tasks") == truth.get("tasks"))
    except Exception as e:  # noqa: BLE001 - the plan's layout is a guess from the headers: keep the capture
        problem = f"planner work list not read: {type(e).__name__}: {e}"
        log(f"  {name}: {problem}")
    grid = truth["grid"] if truth else None
    nb = grid[0] * grid[1] if grid else None
    gt = {"statements": statements(kind, w, truth)}
    if truth is not None:
        gt["plan"] = truth
    if problem:
        gt["plan_problem"] = problem
    workload = {"kernel": kind, "plan_args": plan_record(plan, extra), "spec": {k: v for k, v in w.items()
                                                                           if k not in ("requests", "kv_lens")},
                "inputs": "torch.Generator seed 0 (q rand / randn, kv randn); same tensors for every run",
                "profiler_buffer": {"dtype": "torch.uint64", "allocated_words": args.alloc, "kept_words": args.keep}}
    # first calls (load the modules, warm caches) before any timing
    run_p()
    run_c()
    torch.cuda.synchronize()
    rec = record_runs(run_p, run_c, buf, runs=args.runs, reps=args.reps, warmup=args.warmup, event_names=events,
                      group_names=groups, name=name, out_dir=args.results / "samples", workload=workload,
                      ground_truth=gt, keep_entries=args.keep, kernel=kernel, grid=grid, num_blocks=nb,
                      num_groups=ng, group_of_thread=gof, spin_us=args.spin_us, compress=args.compress,
                      work=kernel_work(kind, w))
    t = rec.timing
    if min(t.with_profiler.median_us, t.without_profiler.median_us) < 2.0:
        log(f"  {name}: WARNING a median under 2 us: the CUDA events may not bracket the kernel (another stream?)")
    if any(h != (nb, ng) for h in rec.headers):
        log(f"  {name}: WARNING header words {rec.headers} differ from the plan's grid ({nb} blocks x {ng} groups)")
    if any(rec.records_past_kept):
        log(f"  {name}: WARNING records past the kept {args.keep} words: {rec.records_past_kept} (raise --keep)")
    decoded = {}
    try:  # ktrace reads what was saved (numpy only): slices, instants and anomalies of each run
        import ktrace

        for b in rec.bins:
            d = ktrace.decode(b)
            decoded.setdefault("slices", []).append(len(d.slices))
            decoded.setdefault("anomalies", []).append(len(d.anomalies))
    except Exception as e:  # noqa: BLE001 - the capture stands; the lead engineer reads the log
        decoded["problem"] = f"{type(e).__name__}: {e}"
        log(f"  {name}: ktrace.decode failed on the saved run: {decoded['problem']}")
    row = {"name": name, "header": [list(h) for h in rec.headers], "expected": [nb, ng], "decoded": decoded,
           "records": rec.records, "records_past_kept": rec.records_past_kept,
           "profiled_us": round(t.with_profiler.median_us, 2), "control_us": round(t.without_profiler.median_us, 2),
           "ratio": round(t.overhead_ratio, 3), "plan": truth is not None,
           "heaviest": (truth or {}).get("heaviest_cta", (truth or {}).get("heaviest_cluster")),
           "heaviest_over_mean": (truth or {}).get("heaviest_cost_over_mean"), "seconds": round(time.time() - t0, 1)}
    return row


# -- JIT builds in parallel processes ---------------------------------------------------------------------------
def build_only(kind: str, profiler: bool) -> None:
    """Plan one small workload of ``kind`` so FlashInfer JIT-builds (and caches) the module."""
    import torch

    dev = torch.device("cuda")
    t0 = time.time()
    if kind == "ba":
        plan, tensors, _ = ba_inputs(dict(WORKLOADS["fi_batch_attention_decode"][1], requests=[(256, 1)] * 8),
                                     torch, dev)
        ba_wrappers(plan, tensors, (profiler,))
    else:
        plan, _, _, _ = mla_inputs(dict(kv_lens=[256] * 8, num_heads=128, page_size=1), torch, dev)
        mla_wrappers(plan, (profiler,))
    torch.cuda.synchronize()
    log(f"built {kind} use_profiler={profiler} in {time.time() - t0:.1f} s")


def parallel_builds(kinds, results: Path) -> None:
    procs = []
    t0 = time.time()
    for kind in kinds:
        for prof in (1, 0):
            f = open(results / f"build_{kind}_{prof}.log", "w")
            p = subprocess.Popen([sys.executable, __file__, "--build", kind, "--profiler", str(prof)], stdout=f,
                                 stderr=subprocess.STDOUT)
            procs.append((f"{kind} use_profiler={bool(prof)}", p, f))
    cal = None
    if importlib.util.find_spec("pycuda") is not None:
        f = open(results / "calibrate.log", "w")
        cal = ("ktrace calibrate", subprocess.Popen([sys.executable, "-m", "ktrace", "calibrate"], stdout=f,
                                                    stderr=subprocess.STDOUT), f)
    else:
        log("no pycuda here: no ktrace calibrate (the sidecars go without timer.tick_ns)")
    for what, p, f in procs + ([cal] if cal else []):
        try:
            rc = p.wait(timeout=max(10.0, 200.0 - (time.time() - t0)))
        except subprocess.TimeoutExpired:
            p.kill()
            rc = "killed (timeout)"
        f.close()
        log(f"  {what}: rc {rc} after {time.time() - t0:.1f} s")
        if rc != 0:
            tail = Path(f.name).read_text(errors="replace")[-2000:]
            log("    " + tail.replace("\n", "\n    "))


def print_table(rows) -> None:
    log(f"{'capture':30s} {'header nb x ng':>14s} {'records':>8s} {'past':>5s} {'slices':>7s} {'anom':>5s} "
        f"{'prof us':>9s} {'ctrl us':>9s} {'ratio':>6s} {'plan':>5s} {'heaviest':>9s} {'x mean':>7s}")
    for r in rows:
        hb, hg = r["header"][0]
        same = all(h == r["header"][0] for h in r["header"])
        log(f"{r['name']:30s} {f'{hb} x {hg}' + ('' if same else '*'):>14s} {r['records'][0]:>8d} "
            f"{max(r['records_past_kept']):>5d} {str((r['decoded'].get('slices') or ['-'])[0]):>7s} "
            f"{str((r['decoded'].get('anomalies') or ['-'])[0]):>5s} {r['profiled_us']:>9.2f} "
            f"{r['control_us']:>9.2f} {r['ratio']:>6.3f} {str(r['plan']):>5s} {str(r['heaviest']):>9s} "
            f"{str(r['heaviest_over_mean']):>7s}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--results", type=Path, default=Path("/tmp/ktrace-flashinfer"))
    ap.add_argument("--only", nargs="*", help="workload names (default: all)")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--alloc", type=int, default=4 << 20, help="profiler buffer words allocated (no bounds check)")
    ap.add_argument("--keep", type=int, default=1 << 20, help="words kept of each run")
    ap.add_argument("--spin-us", type=float, default=1000.0, help="busy kernel before each timed call (hides the "
                    "wrappers' Python overhead)")
    ap.add_argument("--compress", action="store_true", help="write NAME_runK.bin.gz (gzip, mtime 0)")
    ap.add_argument("--no-parallel-build", action="store_true")
    ap.add_argument("--build", choices=["ba", "mla"], help=argparse.SUPPRESS)
    ap.add_argument("--profiler", type=int, default=1, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.build:
        build_only(args.build, bool(args.profiler))
        return 0
    args.results.mkdir(parents=True, exist_ok=True)
    (args.results / "samples").mkdir(exist_ok=True)
    t0 = time.time()
    try:
        import torch
    except ImportError as e:
        log(f"torch is missing ({e}): this script runs on the GPU machine")
        return 3
    if not torch.cuda.is_available():
        log("torch sees no CUDA GPU")
        return 3
    import flashinfer

    from ktrace.capture import record_runs

    log(f"torch {torch.__version__} (CUDA {torch.version.cuda}), flashinfer {flashinfer.__version__}, "
        f"{torch.cuda.get_device_name()} x {torch.cuda.get_device_properties(0).multi_processor_count} SMs")
    names = args.only or list(WORKLOADS)
    unknown = [n for n in names if n not in WORKLOADS]
    if unknown:
        log(f"unknown workloads {unknown}; known: {list(WORKLOADS)}")
        return 2
    kinds = sorted({WORKLOADS[n][0] for n in names})
    if not args.no_parallel_build:
        log(f"building {kinds} (profiled and unprofiled) in parallel")
        parallel_builds(kinds, args.results)
    rows, failed = [], []
    for n in names:
        kind, w = WORKLOADS[n]
        log(f"### {n}")
        try:
            rows.append(capture(n, kind, w, args, torch, record_runs))
            log("  " + json.dumps(rows[-1]))
        except Exception:  # noqa: BLE001 - one workload's failure must not lose the others
            failed.append(n)
            log(traceback.format_exc())
    (args.results / "summary.json").write_text(json.dumps({"rows": rows, "failed": failed,
                                                           "seconds": round(time.time() - t0, 1)}, indent=1))
    log("")
    print_table(rows)
    log(f"{len(rows)} captured, {len(failed)} failed {failed}, {time.time() - t0:.0f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
