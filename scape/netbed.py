"""A shaped-network testbed on one Linux machine (DESIGN section 7).

Every rank lives in its own network namespace, as its own node: one veth pair joins it to a
bridge in a separate "switch" namespace. Each rank's link is shaped in both directions (the
rank's egress and the switch port's egress towards the rank) with netem for the delay and a
tbf child for the rate (the layout netem's documentation gives), so a link is full duplex at
`rate` and a message between two ranks crosses two links: one-way latency 2 x delay.

Only namespaces this process creates are touched, named `scape-<pid>-<n>-...`; deleting a
namespace deletes its veth ends and their qdiscs, so `down()` leaves nothing behind. It runs
on normal exit, on errors, on Ctrl-C and on SIGTERM. `cleanup_stale()` removes namespaces of
testbeds whose process is gone (a `kill -9`).
"""

from __future__ import annotations

import contextlib
import itertools
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from profiles import UserError
from scape.train.parent import die_with_parent
from vocabulary.errors import catch_terminating, restore

PREFIX = "scape-"
SUBNET = "10.77.0"  # private; exists only inside the namespaces a testbed creates
PORT = 29500
_SERIAL = itertools.count()
_UNITS = {"kbit": 1e-3, "mbit": 1.0, "gbit": 1e3}
MIN_RATE_MBIT, MAX_RATE_MBIT = 1e-3, 400e3  # 1 kbit/s .. 400 Gbit/s
MAX_DELAY_MS = 10_000.0


@dataclass(frozen=True)
class NetbedSpec:
    rate_mbit: float  # per link, per direction
    delay_ms: float = 0.0  # per link, per direction (needs netem in the kernel when > 0)

    @classmethod
    def parse(cls, text: str) -> NetbedSpec:
        """`rate=200mbit,delay=1ms` (rate in kbit, mbit or gbit; delay in ms or us)."""
        fields = {}
        for part in filter(None, text.replace(" ", "").split(",")):
            key, _, value = part.partition("=")
            if key in fields:
                raise UserError(f"--netbed gives {key} twice ({text!r}): give it once")
            fields[key] = value
        unknown = set(fields) - {"rate", "delay"}
        if unknown or "rate" not in fields:
            raise UserError(f"--netbed wants rate=<N>mbit[,delay=<D>ms], got {text!r}")
        m = re.fullmatch(r"([0-9]+(?:\.[0-9]+)?)(kbit|mbit|gbit)", fields["rate"].lower())
        if not m or float(m.group(1)) <= 0:
            raise UserError(f"--netbed rate must look like 200mbit or 1gbit, got "
                            f"{fields['rate']!r}")
        rate = float(m.group(1)) * _UNITS[m.group(2)]
        delay = 0.0
        if "delay" in fields:
            d = re.fullmatch(r"([0-9]+(?:\.[0-9]+)?)(ms|us)", fields["delay"].lower())
            if not d:
                raise UserError(f"--netbed delay must look like 1ms or 200us, got "
                                f"{fields['delay']!r}")
            delay = float(d.group(1)) * (1.0 if d.group(2) == "ms" else 1e-3)
        # links a shaped veth can stand for: slower would take hours a collective, faster is
        # beyond what one host's veth pair moves
        if not MIN_RATE_MBIT <= rate <= MAX_RATE_MBIT:
            raise UserError(f"--netbed rate must be between 1kbit and 400gbit, got "
                            f"{fields['rate']!r}")
        if delay > MAX_DELAY_MS:
            raise UserError(f"--netbed delay must be at most {MAX_DELAY_MS:g}ms (one way), got "
                            f"{fields['delay']!r}")
        return cls(rate, delay)

    @classmethod
    def recorded(cls, text: str, profile: str) -> NetbedSpec | None:
        """The netbed a measured profile's [measured] network_netbed names (None: loopback,
        "none ..."); a damaged value is refused as the profile's, not as a typed --netbed."""
        if text.startswith("none"):
            return None
        try:
            return cls.parse(text)
        except UserError as exc:
            raise UserError(f"profile {profile}: [measured] network_netbed {text!r} is no "
                            f"netbed `scape calibrate` writes ({str(exc).removeprefix('--')}); "
                            "calibrate the profile again") from None

    def __str__(self) -> str:
        return f"rate={self.rate_mbit:g}mbit,delay={self.delay_ms:g}ms"

    @property
    def rate_Bps(self) -> float:
        return self.rate_mbit * 1e6 / 8

    @property
    def burst_bytes(self) -> int:
        """The tbf bucket of each shaped link: 0.5 ms of traffic, at least two full frames (a
        larger bucket lets the first bytes of every message pass at veth speed, a smaller one
        starves the timer at 1 Gbit/s). A call that starts with the bucket full sends its
        first burst_bytes at veth speed: the collective fit and the simulator take them off
        the bytes a link carries (simulator/network/fit.py, simulator/network/collective.py)."""
        return max(2 * 1514, int(self.rate_Bps * 5e-4))


def check_available(why: str = "drop --netbed") -> None:
    """Refuse in one line where namespaces cannot be built; `why`: what else the user can do
    (a typed --netbed can be dropped; a profile measured on a netbed runs on one)."""
    if os.geteuid() != 0:
        raise UserError(f"the netbed needs root (network namespaces and tc); run as root or "
                        f"{why}")
    missing = [tool for tool in ("ip", "tc") if shutil.which(tool) is None]
    if missing:
        raise UserError(f"the netbed needs the {' and '.join(missing)} command(s) "
                        f"(iproute2); install iproute2 or {why}")


def _sh(*args: str) -> None:
    proc = subprocess.run(args, capture_output=True, text=True)
    if proc.returncode != 0:
        raise UserError(f"netbed: `{' '.join(args)}` failed: "
                        f"{(proc.stderr or proc.stdout).strip()[:200]}")


def namespaces() -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def cleanup_stale() -> list[str]:
    """Delete `scape-<pid>-*` namespaces whose creating process no longer runs, ending first
    the ranks that testbed left running inside them (`ip netns pids`: the processes of that
    namespace, which only a testbed of this tool started)."""
    removed = []
    for ns in namespaces():
        m = re.fullmatch(rf"{PREFIX}(\d+)-[\w-]+", ns)
        if m and not Path(f"/proc/{m.group(1)}").exists():
            pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True,
                                  text=True).stdout.split()
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(pid), signal.SIGKILL)
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
            removed.append(ns)
    return removed


class Netbed:
    """`with Netbed(spec, ranks) as bed:` builds the testbed and always tears it down."""

    def __init__(self, spec: NetbedSpec, ranks: int):
        if ranks < 1:
            raise UserError(f"the netbed needs at least one rank, got {ranks}")
        if ranks > 250:
            raise UserError(f"the netbed addresses at most 250 ranks, got {ranks}")
        self.spec, self.ranks = spec, ranks
        # unique per testbed, so one never meets a namespace another is still tearing down
        tag = f"{PREFIX}{os.getpid()}-{next(_SERIAL)}"
        self.switch = f"{tag}-sw"
        self.rank_ns = [f"{tag}-r{r}" for r in range(ranks)]
        self.created: list[str] = []
        self._old_term = None

    def address(self, rank: int) -> str:
        return f"{SUBNET}.{rank + 1}"

    # ---- up and down ----
    def __enter__(self) -> Netbed:
        check_available()
        self._old_term = catch_terminating()  # SIGTERM / SIGHUP: torn down as for Ctrl-C
        try:
            self.up()
        except BaseException:
            self.down()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.down()

    def up(self) -> None:
        for ns in (self.switch, *self.rank_ns):
            if ns in namespaces():
                raise UserError(f"netbed: namespace {ns} already exists")
            _sh("ip", "netns", "add", ns)
            self.created.append(ns)
        _sh("ip", "-n", self.switch, "link", "add", "br0", "type", "bridge")
        _sh("ip", "-n", self.switch, "link", "set", "br0", "up")
        for r, ns in enumerate(self.rank_ns):
            port = f"r{r}"
            # created directly inside the namespaces: no name ever appears on the host
            _sh("ip", "link", "add", "eth0", "netns", ns, "type", "veth",
                "peer", "name", port, "netns", self.switch)
            _sh("ip", "-n", self.switch, "link", "set", port, "master", "br0", "up")
            _sh("ip", "-n", ns, "addr", "add", f"{self.address(r)}/24", "dev", "eth0")
            _sh("ip", "-n", ns, "link", "set", "eth0", "up")
            _sh("ip", "-n", ns, "link", "set", "lo", "up")
            self._shape(ns, "eth0")  # rank -> switch
            self._shape(self.switch, port)  # switch -> rank

    def _shape(self, ns: str, dev: str) -> None:
        spec = self.spec
        rate_Bps = spec.rate_Bps
        # tbf: a bucket of spec.burst_bytes and a queue of 100 ms, so TCP sees a paced link,
        # not a dropping one
        burst = spec.burst_bytes
        # tc takes a 32-bit byte count: at 400 Gbit/s 100 ms would be 5 GB (its raw error)
        limit = min(max(4 * burst, int(rate_Bps * 0.1)), 2**32 - 1)
        tbf = ["tbf", "rate", f"{spec.rate_mbit * 1000:.0f}kbit", "burst", str(burst),
               "limit", str(limit)]
        if spec.delay_ms == 0:
            _sh("tc", "-n", ns, "qdisc", "add", "dev", dev, "root", "handle", "1:", *tbf)
            return
        netem = subprocess.run(["tc", "-n", ns, "qdisc", "add", "dev", dev, "root", "handle",
                                "1:", "netem", "delay", f"{spec.delay_ms * 1000:.0f}us",
                                "limit", "100000"], capture_output=True, text=True)
        if netem.returncode != 0:
            why = (netem.stderr or netem.stdout).strip()
            if "unknown" in why.lower():
                raise UserError("netbed: this kernel has no netem qdisc (CONFIG_NET_SCH_NETEM), "
                                "so it cannot add a delay; use delay=0ms (rate shaping with tbf "
                                "alone) or a kernel with netem")
            raise UserError(f"netbed: adding the netem delay failed: {why[:200]}")
        _sh("tc", "-n", ns, "qdisc", "add", "dev", dev, "parent", "1:1", "handle", "10:", *tbf)

    def down(self) -> None:
        for ns in reversed(self.created):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        self.created = []
        if self._old_term is not None:
            restore(self._old_term)
            self._old_term = None

    # ---- running ranks ----
    def command(self, rank: int, argv: Sequence[str]) -> list[str]:
        return ["ip", "netns", "exec", self.rank_ns[rank], *argv]

    def rank_env(self, rank: int, base: dict | None = None) -> dict[str, str]:
        """torch.distributed's env:// rendezvous, one node per rank, gloo (and NCCL's sockets,
        scape/train/devices.py) bound to the veth."""
        return {**(base if base is not None else os.environ), "RANK": str(rank),
                "WORLD_SIZE": str(self.ranks), "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
                "GROUP_RANK": str(rank), "MASTER_ADDR": self.address(0),
                "MASTER_PORT": str(PORT), "GLOO_SOCKET_IFNAME": "eth0",
                "NCCL_SOCKET_IFNAME": "eth0"}

    def run(self, argv: Sequence[str], timeout_s: float, env: dict | None = None,
            log: Path | None = None) -> list[int]:
        """Run `argv` once per rank, each in its namespace; returns the exit codes. When one
        rank fails, the others are ended (they would wait for it until their timeout)."""
        out = open(log, "w") if log else subprocess.DEVNULL  # noqa: SIM115
        procs = [subprocess.Popen(self.command(r, argv), env=self.rank_env(r, env),
                                  stdout=out, stderr=subprocess.STDOUT,
                                  preexec_fn=die_with_parent)  # they end with this launcher
                 for r in range(self.ranks)]
        try:
            deadline = time.monotonic() + timeout_s
            while any(p.poll() is None for p in procs):
                failed = any(p.returncode not in (None, 0) for p in procs)
                if failed or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
        finally:
            for p in procs:  # ours, by pid: a rank still running after a failure or timeout
                if p.poll() is None:
                    p.terminate()
            for p in procs:
                try:
                    p.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
            if log:
                out.close()
        return [p.returncode for p in procs]


# ---- link measurements (`scape netbed`, tests) ----
# the probes' children end quietly on Ctrl-C (SIGINT reaches the whole foreground group; the
# default action, not a KeyboardInterrupt traceback on the user's terminal)
QUIET_SIGINT = "import signal; signal.signal(signal.SIGINT, signal.SIG_DFL)\n"
_PROBE = QUIET_SIGINT + r"""
import socket, sys, time
mode, host, port, nbytes = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
if mode == "server":
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((host, port)); s.listen(1); c, _ = s.accept()
    got = 0
    while got < nbytes:
        chunk = c.recv(1 << 20)
        if not chunk: break
        got += len(chunk)
    c.sendall(b"k"); c.close()
else:
    for _ in range(200):
        try:
            c = socket.create_connection((host, port)); break
        except OSError:
            time.sleep(0.05)
    c.sendall(b"x" * (64 << 10))  # slow start over before the clock starts
    buf = b"x" * (1 << 20); t0 = time.perf_counter(); sent = 64 << 10
    while sent < nbytes:
        n = min(len(buf), nbytes - sent); c.sendall(buf[:n]); sent += n
    c.recv(1); dt = time.perf_counter() - t0
    print((nbytes - (64 << 10)) * 8 / dt / 1e6)
"""


PROBE_MIN_BYTES = 16 * (64 << 10)  # 1 MiB: 16 times the untimed slow-start part


PROBE_MAX_S = 600.0  # the longest probe `scape netbed --seconds` takes


def check_probe(spec: NetbedSpec, seconds: float) -> None:
    """Refuse a probe that moves too little at `spec`'s rate to be timed (its first 64 KiB are
    slow start, not timed), naming the --seconds that suffices, or the slowest rate a probe of
    at most PROBE_MAX_S can time."""
    if spec.rate_Bps * seconds >= PROBE_MIN_BYTES:
        return
    need = math.ceil(PROBE_MIN_BYTES / spec.rate_Bps * 1000) / 1000  # rounded up: it suffices
    slowest = PROBE_MIN_BYTES * 8 / PROBE_MAX_S / 1e6  # Mbit/s
    fix = (f"give --seconds {need:g} or more" if need <= PROBE_MAX_S else
           f"the slowest rate a probe of at most {PROBE_MAX_S:g} s can time is "
           f"{slowest:.3g}mbit")
    raise UserError(f"--seconds {seconds:g} at {spec.rate_mbit:g} Mbit/s moves too little to "
                    f"time (the probe needs {PROBE_MIN_BYTES:,} bytes): {fix}")


def measure_throughput_mbit(bed: Netbed, src: int, dst: int, seconds: float = 2.0) -> float:
    """TCP goodput from rank `src` to rank `dst` in Mbit/s (payload bytes, over about
    `seconds`); the headers make it about 4% below the shaped rate at a 1500-byte MTU."""
    check_probe(bed.spec, seconds)
    nbytes = int(bed.spec.rate_Bps * seconds)
    host = bed.address(dst)
    server = subprocess.Popen(bed.command(dst, [sys.executable, "-c", _PROBE, "server", host,
                                                "5201", str(nbytes)]))
    try:
        try:
            client = subprocess.run(bed.command(src, [sys.executable, "-c", _PROBE, "client",
                                                      host, "5201", str(nbytes)]),
                                    capture_output=True, text=True, timeout=60 + 4 * seconds)
        except subprocess.TimeoutExpired:
            raise UserError(f"netbed: the throughput probe did not finish in "
                            f"{60 + 4 * seconds:g} s at {bed.spec.rate_mbit:g} Mbit/s") from None
        if client.returncode != 0:
            raise UserError(f"netbed: throughput probe failed: {client.stderr.strip()[:200]}")
        return float(client.stdout.strip())
    finally:
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:  # the client never connected: ours, end it
            server.kill()
            server.wait()


def measure_rtt_ms(bed: Netbed, src: int, dst: int, count: int = 5) -> float:
    """Median TCP connect round trip from `src` to `dst` (a SYN and its SYN-ACK), in ms."""
    code = (
        QUIET_SIGINT + "import socket,statistics,sys,time\n"
        "s=socket.socket();s.bind((sys.argv[1],5202));s.listen(64)\n"
        "import threading\n"
        "threading.Thread(target=lambda:[s.accept()[0].close() for _ in range(int(sys.argv[2]))],"
        "daemon=True).start()\n"
        "time.sleep(30)\n")
    server = subprocess.Popen(bed.command(dst, [sys.executable, "-c", code, bed.address(dst),
                                                str(count + 1)]))
    try:
        probe = (
            QUIET_SIGINT + "import socket,statistics,sys,time\n"
            "r=[]\n"
            "for i in range(int(sys.argv[2])+1):\n"
            "  for _ in range(200):\n"
            "    try:\n"
            "      t=time.perf_counter();c=socket.create_connection((sys.argv[1],5202));"
            "r.append(time.perf_counter()-t);c.close();break\n"
            "    except OSError: time.sleep(0.05)\n"
            "print(statistics.median(r[1:])*1e3)\n")
        out = subprocess.run(bed.command(src, [sys.executable, "-c", probe, bed.address(dst),
                                               str(count)]),
                             capture_output=True, text=True, timeout=60)
        if out.returncode != 0:
            raise UserError(f"netbed: latency probe failed: {out.stderr.strip()[:200]}")
        return float(out.stdout.strip())
    finally:
        server.terminate()
        server.wait()
