"""Rule families of the anomaly engine, one module per family (anomalies.md sections 4, 6).

``ALL_RULES`` is the registry the engine instantiates from; a rule runs when its
section in the rules configuration has ``enabled = true``. Keep in sync with
defaults.toml (one section per rule id) and docs/alerts.md.
"""

from __future__ import annotations

from .base import Rule
from .buffers import PeerZeroWindow, ReceiveBuffer
from .drops import DropBurst
from .handshakes import ConnectFailures, ScanAndFlood
from .health import CollectorLoss, CollectorOverhead
from .listen_overflow import ListenOverflow
from .perf import CwndCollapse, SrttSpike
from .pmtu_blackhole import PathMtuBlackHole
from .resets import ResetStorm
from .retrans import RetransKind, RetransRatio
from .states import HalfOpen
from .stuck_close import StuckClose
from .udp_drops import UdpDrops

ALL_RULES: tuple[type[Rule], ...] = (
    RetransRatio,  # K1
    RetransKind,  # K2
    PathMtuBlackHole,  # K2 pmtu-black-hole
    ResetStorm,  # K3
    ListenOverflow,  # K4
    ReceiveBuffer,  # K5
    CwndCollapse,  # K6
    SrttSpike,  # K7
    HalfOpen,  # K8
    ScanAndFlood,  # K9
    StuckClose,  # K10
    UdpDrops,  # K11
    DropBurst,  # K12
    PeerZeroWindow,  # K13
    ConnectFailures,  # K14
    CollectorLoss,  # H1
    CollectorOverhead,  # H4
)
