"""A trace cut short is refused before it is analyzed (ktrace/engine/framing.py), by every command."""

import gzip

import pytest

from ktrace.engine.framing import Framing
from ktrace.core.errors import InputError

from conftest import run_ktrace, sample


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    out = tmp_path_factory.mktemp("framing") / "full.perfetto-trace"
    assert run_ktrace("convert", sample("imbalance"), "-o", out)[0] == 0
    return out


def walk(data: bytes, chunk: int = 4096) -> int:
    f = Framing("t")
    for i in range(0, len(data), chunk):
        f.feed(data[i:i + chunk])
    return f.finish()


@pytest.mark.slow
def test_a_whole_trace_walks_in_any_chunking_and_gzip(trace):
    data = trace.read_bytes()
    n = walk(data)
    assert n > 1000 and walk(data, 7) == n and walk(gzip.compress(data), 333) == n


@pytest.mark.slow
def test_a_trace_cut_inside_a_packet_or_its_header_is_refused(trace):
    data = trace.read_bytes()
    for cut in (len(data) // 2, len(data) - 1, 3):
        with pytest.raises(InputError, match="truncated|cut short"):
            walk(data[:cut])
    with pytest.raises(InputError, match="cut short"):
        walk(gzip.compress(data)[:-50])


def test_a_length_prefix_past_the_end_is_refused():
    packet = b"\x0a\x05hello"
    assert walk(packet * 3) == 3
    with pytest.raises(InputError, match="runs past the end"):
        walk(packet + b"\x0a\x7f" + b"x" * 10)  # declares 127 bytes, 10 are there


@pytest.mark.slow
def test_commands_refuse_a_cut_trace_with_exit_2(trace, tmp_path):
    half = tmp_path / "half.perfetto-trace"
    half.write_bytes(trace.read_bytes()[: trace.stat().st_size // 2])
    rc, _, err = run_ktrace("check", half, "--rule", "kernel.slices > 0")
    assert rc == 2 and "truncated" in err
    rc, _, err = run_ktrace("analyze", half)
    assert rc == 2 and "truncated" in err
    rc, _, err = run_ktrace("diff", trace, half)
    assert rc == 2 and "truncated" in err
    assert run_ktrace("check", trace, "--rule", "kernel.slices > 0")[0] == 0


@pytest.mark.slow
def test_the_walk_counts_what_protobuf_parses_and_refuses_every_cut(trace):
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

    data = trace.read_bytes()
    # Packets of 128 bytes and more (two length bytes) too: a big interned-names packet, a large one.
    big = pb.TracePacket(trusted_packet_sequence_id=1)
    big.interned_data.event_names.add(iid=999, name="x" * 300)
    huge = pb.TracePacket(trusted_packet_sequence_id=1)
    huge.interned_data.event_names.add(iid=998, name="y" * 20000)
    extra = pb.Trace(packet=[big, huge]).SerializeToString()
    for whole in (data, extra + data + extra):
        want = len(pb.Trace.FromString(whole).packet)
        for chunk in (1, 3, 130, 4096, len(whole)):
            assert walk(whole, chunk) == want
    import random

    rng = random.Random(7)
    starts = {0}
    i = 0
    for p in pb.Trace.FromString(extra + data).packet:
        i += len(pb.Trace(packet=[p]).SerializeToString())
        starts.add(i)
    whole = extra + data
    for cut in rng.sample(range(1, len(whole)), 60) + [len(extra) - 1, len(extra) + 1]:
        if cut in starts:
            continue  # a cut between packets is a shorter trace, not a cut one
        with pytest.raises(InputError, match="truncated|cut"):
            walk(whole[:cut], rng.choice((5, 64, 4096)))
