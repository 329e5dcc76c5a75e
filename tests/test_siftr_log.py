"""SIFTR log writer and parser (translators/siftr_log.py): golden lines, round trips, errors."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from analysis.capture.siftr import looks_like_siftr, read_siftr
from translators.records import LossReport, SiftrSample
from translators.siftr_log import (
    SiftrLogError,
    format_address,
    linux_version_code,
    read_log,
    write_log,
)

T0 = 1_700_000_000.25


def sample(i: int = 0, **kw: object) -> SiftrSample:
    base: dict[str, object] = dict(
        host_id="h", boot_id="b", seq=i + 1, ts_ns=0, ts_wall=1_700_000_000 + (250_000 + i * 1000) / 1e6, provider="siftr", probe="siftr",
        direction="out" if i % 2 == 0 else "in", ip_ver=4, src="10.0.0.5", sport=44312, dst="10.0.0.9", dport=5432,
        snd_cwnd=14480 + i, snd_ssthresh=65535, snd_wnd=65536, rcv_wnd=131072, t_flags=0x2A4, t_flags2=0x20,
        conn_state=4, mss=1448, srtt=2250, rto=204000, sack_enabled=True, snd_scale=7, rcv_scale=8,
        snd_buf_hiwater=87040, snd_buf_cc=2896, rcv_buf_hiwater=131072, rcv_buf_cc=0, sent_inflight_bytes=2896,
        t_segqlen=0, flowid=0xDEADBEEF, flowtype=0, th_seq=1000 + i, th_ack=2000, data_sz=1448,
    )  # fmt: skip
    base.update(kw)
    return SiftrSample(**base)  # type: ignore[arg-type]


def render(samples: list[SiftrSample], version: str, **kw: object) -> str:
    out = io.StringIO()
    write_log(out, samples, version=version, sysver=0x06122C, **kw)  # type: ignore[arg-type]
    return out.getvalue()


def test_it_writes_the_1_3_0_header_data_line_and_footer_exactly() -> None:
    lines = render([sample(0)], "1.3.0", enable_time=T0, disable_time=T0 + 1).splitlines()
    assert (
        lines[0]
        == "enable_time_secs=1700000000\tenable_time_usecs=250000\tsiftrver=1.3.0\tsysname=Linux\tsysver=397868\tipmode=6"
    )
    assert lines[1] == (
        "o,1700000000.250000,10.0.0.5,44312,10.0.0.9,5432,65535,14480,32,65536,131072,7,8,4,1448,2250,1,676,204000,"
        "87040,2896,131072,0,2896,0,3735928559,0"
    )
    assert lines[2] == (
        "disable_time_secs=1700000001\tdisable_time_usecs=250000\tnum_inbound_tcp_pkts=0\tnum_outbound_tcp_pkts=1\t"
        "total_tcp_pkts=1\tnum_inbound_skipped_pkts_malloc=0\tnum_outbound_skipped_pkts_malloc=0\t"
        "num_inbound_skipped_pkts_tcpcb=0\tnum_outbound_skipped_pkts_tcpcb=0\tnum_inbound_skipped_pkts_inpcb=0\t"
        "num_outbound_skipped_pkts_inpcb=0\ttotal_skipped_tcp_pkts=0\tflow_list=10.0.0.5;44312-10.0.0.9;5432,"
    )
    assert len(lines) == 3


def test_a_polled_sample_is_no_line_of_a_siftr_log() -> None:
    """siftr-poll's samples are not packets; each line of a SIFTR log is one, in or out."""
    polled = sample(1, direction="poll", th_seq=None, th_ack=None, data_sz=None)
    with_poll = render([sample(0), polled], "1.3.0", enable_time=T0, disable_time=T0 + 1)
    assert with_poll == render([sample(0)], "1.3.0", enable_time=T0, disable_time=T0 + 1)


def test_it_writes_1_2_lines_with_hash_bwnd_and_tick_units() -> None:
    text = render([sample(0)], "1.2.3", enable_time=T0, disable_time=T0)
    header, line, footer = text.splitlines()
    assert header.split("\t")[2:5] == ["siftrver=1.2.3", "hz=250", "tcp_rtt_scale=32"]
    # srtt 2250 us * 250 Hz * 32 / 1e6 = 18; rto 204000 us * 250 / 1e6 = 51 ticks
    assert line == (
        "o,0x00000000,1700000000.250000,10.0.0.5,44312,10.0.0.9,5432,65535,14480,14480,65536,131072,7,8,4,1448,18,1,"
        "676,51,87040,2896,131072,0,2896"
    )
    assert "num_inbound_skipped_pkts_mtx=0" in footer


def test_it_writes_2_x_lines_keyed_by_flowid_with_the_flow_in_the_footer() -> None:
    text = render([sample(0)], "2.2", enable_time=T0, disable_time=T0)
    header, line, footer = text.splitlines()
    assert header.endswith("ipmode=4")
    assert (
        line
        == "o,1700000000.250000,deadbeef,14480,65535,65536,131072,676,32,4,2250,204000,87040,2896,131072,0,2896,0,1000,2000,1448"
    )
    assert footer.split("\t")[2:7] == [
        "global_flow_cnt=1",
        "max_tmp_qsize=0",
        "avg_tmp_qsize=0",
        "max_str_size=0",
        "alq_getn_fail_cnt=0",
    ]
    assert footer.endswith("flow_list=deadbeef,10.0.0.5,44312,10.0.0.9,5432,0,0,1448,1,7,8,1,1;")
    text20 = render([sample(0)], "2.0", enable_time=T0, disable_time=T0)
    assert text20.splitlines()[1].split(",")[2] == "3735928559"
    assert text20.endswith("flow_list=3735928559,10.0.0.5,44312,10.0.0.9,5432,1448,1,7,8,1;\n")


def test_it_prints_ipv6_uncompressed_for_1_2_and_compressed_for_1_3() -> None:
    assert format_address("fe80::20f:feff:fea2:531b", "1.2") == "fe80:0:0:0:20f:feff:fea2:531b"
    assert format_address("fe80::20f:feff:fea2:531b", "1.3") == "fe80::20f:feff:fea2:531b"
    assert format_address("10.1.2.3", "1.2") == "10.1.2.3"


def test_it_encodes_linux_version_code_with_the_patch_clamped() -> None:
    assert linux_version_code("6.18.44-fc-v857") == (6 << 16) + (18 << 8) + 44
    assert linux_version_code("5.10.300") == (5 << 16) + (10 << 8) + 255


CARRIED = {
    "1.2.3": ("direction", "ts_wall", "ts_ns", "ip_ver", "src", "sport", "dst", "dport", "snd_ssthresh", "snd_cwnd", "snd_wnd", "rcv_wnd",
              "snd_scale", "rcv_scale", "conn_state", "mss", "srtt", "sack_enabled", "t_flags", "rto",
              "snd_buf_hiwater", "snd_buf_cc", "rcv_buf_hiwater", "rcv_buf_cc", "sent_inflight_bytes"),
}  # fmt: skip
CARRIED["1.3.0"] = (*CARRIED["1.2.3"], "t_flags2", "t_segqlen", "flowid", "flowtype")
CARRIED["2.0"] = (*CARRIED["1.3.0"][:-1], "th_seq", "th_ack", "data_sz")  # no flowtype in 2.x
CARRIED["2.2"] = CARRIED["2.0"]


def many_samples() -> list[SiftrSample]:
    flows = [("10.0.0.5", 44312, "10.0.0.9", 5432), ("192.168.1.2", 80, "192.168.1.77", 61000)]
    out = []
    for i in range(40):
        src, sport, dst, dport = flows[i % 2]
        # srtt/rto multiples of the 1.2 tick units so the round trip is exact there too
        out.append(sample(i, src=src, sport=sport, dst=dst, dport=dport, srtt=125 * (i + 3), rto=4000 * (i + 50),
                          flowid=0x1000 + i % 2, ts_ns=1_700_000_000 * 10**9 + (250_000 + i * 1000) * 1000))  # fmt: skip
    return out


@pytest.mark.parametrize("version", ["1.2.3", "1.3.0", "2.0", "2.2"])
def test_it_round_trips_every_field_the_format_carries(tmp_path: Path, version: str) -> None:
    samples = many_samples()
    path = tmp_path / "trace.siftr"
    path.write_text(render(samples, version, enable_time=T0 - 1, disable_time=T0 + 5))
    log = read_log(path, host_id="cap", boot_id="x")
    assert log.header.version == version and log.header.sysname == "Linux" and log.header.sysver == 0x06122C
    assert log.footer is not None and len(log.footer.flows) == 2
    assert len(log.samples) == len(samples)
    for original, parsed in zip(samples, log.samples, strict=True):
        for name in CARRIED[version]:
            assert getattr(parsed, name) == getattr(original, name), (version, name)
    assert [s.seq for s in log.samples] == list(range(1, 41))
    assert len({s.conn_uuid for s in log.samples}) == 2


def test_it_round_trips_ipv6_flows_in_1_2_and_1_3(tmp_path: Path) -> None:
    s = sample(0, ip_ver=6, src="2001:db8::1", dst="fe80::20f:feff:fea2:531b")
    for version in ("1.2.3", "1.3.0"):
        path = tmp_path / f"{version}.siftr"
        path.write_text(render([s], version))
        (parsed,) = read_log(path, host_id="h", boot_id="b").samples
        assert (parsed.src, parsed.dst, parsed.ip_ver) == ("2001:db8::1", "fe80::20f:feff:fea2:531b", 6)


def test_it_refuses_ipv6_in_a_2_x_log() -> None:
    with pytest.raises(ValueError, match="IPv4 only"):
        render([sample(0, ip_ver=6, src="::1", dst="::1")], "2.2")


def test_footer_counters_include_skips_and_keep_the_invariant(tmp_path: Path) -> None:
    text = render(
        many_samples(), "1.3.0", skipped={"num_inbound_skipped_pkts_tcpcb": 3, "num_outbound_skipped_pkts_inpcb": 2}
    )
    path = tmp_path / "t.siftr"
    path.write_text(text)
    footer = read_log(path, host_id="h", boot_id="b").footer
    assert footer is not None
    c = footer.counters
    assert (c["num_inbound_tcp_pkts"], c["num_outbound_tcp_pkts"], c["total_tcp_pkts"]) == (23, 22, 45)
    assert c["total_skipped_tcp_pkts"] == 5
    assert c["total_tcp_pkts"] - c["total_skipped_tcp_pkts"] == 40  # data lines (ppl = 1)
    assert [(f.laddr, f.lport) for f in footer.flows] == [("10.0.0.5", 44312), ("192.168.1.2", 80)]


def test_it_accepts_the_man_page_tcb_icb_counter_spelling(tmp_path: Path) -> None:
    text = render([sample(0)], "1.2.3").replace("_tcpcb=", "_tcb=").replace("_inpcb=", "_icb=")
    path = tmp_path / "old.siftr"
    path.write_text(text)
    footer = read_log(path, host_id="h", boot_id="b").footer
    assert footer is not None and footer.counters["num_inbound_skipped_pkts_tcpcb"] == 0
    assert "num_outbound_skipped_pkts_inpcb" in footer.counters


def test_it_reads_2_x_flowids_in_decimal_or_hex(tmp_path: Path) -> None:
    hexa = render([sample(0)], "2.2")
    dec = hexa.replace("deadbeef", "3735928559").replace("siftrver=2.2", "siftrver=2.0")
    dec = dec.replace(",0,0,1448,1,7,8,1,1;", ",1448,1,7,8,1;")
    for name, text in (("hex", hexa), ("dec", dec), ("0x", hexa.replace("deadbeef", "0xdeadbeef"))):
        path = tmp_path / f"{name}.siftr"
        path.write_text(text)
        (parsed,) = read_log(path, host_id="h", boot_id="b").samples
        assert parsed.flowid == 0xDEADBEEF and parsed.src == "10.0.0.5" and parsed.mss == 1448, name


@pytest.mark.parametrize(
    ("mutate", "lineno", "message"),
    [
        (lambda ls: ls[:2] + ["o,1,2,3"] + ls[2:], 3, "expected 27 comma-separated fields"),
        (lambda ls: [ls[0], ls[1].replace("o,", "x,", 1)] + ls[2:], 2, "direction must be i or o"),
        (lambda ls: [ls[0], ls[1].replace(".250000", ".25", 1)] + ls[2:], 2, "6 digits"),
        (
            lambda ls: [ls[0], ls[1].replace(",65535,", ",-5,", 1)] + ls[2:],
            2,
            "snd_ssthresh: expected an unsigned integer",
        ),
        (lambda ls: [ls[0].replace("siftrver=1.3.0", "siftrver=9.9")] + ls[1:], 1, "unsupported SIFTR version"),
        (lambda ls: [ls[0].replace("\tsysver=397868", "")] + ls[1:], 1, "header lacks sysver"),
        (
            lambda ls: ls[:2] + [ls[2].replace("total_tcp_pkts=1", "total_tcp_pkts=x")],
            3,
            "total_tcp_pkts: not an integer",
        ),
        (lambda ls: ls + ["o,1"], 4, "data after the footer"),
    ],
)
def test_it_names_the_line_of_a_malformed_log(tmp_path: Path, mutate, lineno: int, message: str) -> None:  # type: ignore[no-untyped-def]
    lines = render([sample(0)], "1.3.0", enable_time=T0, disable_time=T0).splitlines()
    path = tmp_path / "bad.siftr"
    path.write_text("\n".join(mutate(lines)) + "\n")
    with pytest.raises(SiftrLogError) as info:
        read_log(path, host_id="h", boot_id="b")
    assert info.value.lineno == lineno
    assert f"bad.siftr:{lineno}: " in str(info.value) and message in str(info.value)


def test_a_2_x_line_with_an_unknown_flowid_is_an_error(tmp_path: Path) -> None:
    lines = render([sample(0)], "2.2").splitlines()
    lines[1] = lines[1].replace("deadbeef", "cafe")
    path = tmp_path / "x.siftr"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(SiftrLogError, match=r"x.siftr:2: flowid 'cafe' is not in the footer"):
        read_log(path, host_id="h", boot_id="b")


def test_the_source_names_records_after_the_file_and_reports_skips_as_loss(tmp_path: Path) -> None:
    path = tmp_path / "box.siftr"
    path.write_text(render(many_samples()[:4], "1.3.0", skipped={"num_outbound_skipped_pkts_inpcb": 7}))
    assert looks_like_siftr(path) and not looks_like_siftr(__file__)
    records = list(read_siftr(path))
    assert [r.kind for r in records] == ["siftr_sample"] * 4 + ["loss_report"]
    assert {r.host_id for r in records} == {"box.siftr"} and len(records[0].boot_id) == 16
    loss = records[-1]
    assert isinstance(loss, LossReport)
    assert (loss.event_type, loss.lost, loss.received_total, loss.seq) == ("outbound_skipped_pkts_inpcb", 7, 11, 5)
