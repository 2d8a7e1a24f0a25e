"""The ring elastic replicas reduce over, without a store.

A Python job's replicas regroup here when one is lost (elastic.py). The
controller already knows every generation's members, so it hands each rank
its ring neighbours' fixed addresses in the ASSIGN (BULWARK_RING_PLAN,
common/ring_layout.h's EncodeRingPlan: "nonce;group;rank=addr:port,..."),
and each rank listens at its slot's address (BULWARK_RING_ADDR) for the
life of the process. A generation then costs a rank one dial (to its
successor) and one accept (from its predecessor): no store, no rank that
everyone must reach, and nothing that grows with the width.

Why not torch's own `dist._reconfigure` (torch >= 2.14): on Gloo it re-forms
the mesh through the group's store (its keys go under "reconfigure/"), so
the store's host, rank 0 of the first generation, is still a single point
of failure: with it gone there is nothing left to reconfigure through.

Links are dialled afresh at every generation: a link is cheap (two per
rank) and a fresh one cannot hold a failed generation's frames. Every
message carries the generation's nonce and a sequence number, and a HELLO
of another generation is kept for when this rank gets there (a peer may be
one generation ahead).

A collective that fails on one rank (a neighbour's EOF, a timeout, its
agent's word that the generation is over) closes both its links, so each
neighbour's collective fails at once and closes its own: the failure goes
round the ring the way a dead peer's closed sockets reach every rank of a
mesh.

The sums are over numpy arrays. The exact gradient sum of elastic.py is an
int64 sum, the same bits in any order, so the ring's order does not matter.
"""

import errno
import select
import socket
import struct
import time

import numpy as np

__all__ = ["Ring", "RingError", "Listener", "decode_plan", "chunk_of"]

_HELLO = struct.Struct("<QQii")  # magic, nonce, rank, world
_HEAD = struct.Struct("<QQ")     # nonce, sequence
_MAGIC = 0x62756C7761726B31      # "bulwark1"


class RingError(RuntimeError):
    """A ring collective failed: a peer is gone, hangs, or the agent ended
    the generation. The text says "peer lost" so that bulwark.is_peer_lost
    reads it as what it is."""


def decode_plan(text):
    """(nonce, {rank: "addr:port"}) of an encoded ring plan; ValueError names
    what is wrong. A layout view after a third ';' (two-level rings) is
    ignored: this ring is flat, and the plan always names the flat ring's
    neighbours."""
    parts = text.split(";")
    if len(parts) < 3 or not parts[0].isdigit():
        raise ValueError("ring plan %r: want nonce;group;rank=addr:port,..." % text[:80])
    who = {}
    for item in filter(None, parts[2].split(",")):
        r, eq, addr = item.partition("=")
        if not eq or not r.isdigit() or ":" not in addr:
            raise ValueError("ring plan %r: %r is not rank=addr:port" % (text[:80], item))
        who[int(r)] = addr
    return int(parts[0]), who


def chunk_of(n, i, parts):
    """Part i of `parts` of n elements: [n i / P, n (i + 1) / P), as
    common/ring_layout.h's ChunkOf cuts every flat buffer."""
    return n * i // parts, n * (i + 1) // parts


def _split(address):
    host, _, port = address.rpartition(":")
    return host, int(port)


class Listener:
    """A process's listening socket at its slot's fixed address, and the
    HELLOs of generations it has not reached yet."""

    def __init__(self, address, timeout_s=10.0):
        self.address = address
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        # The agent holds the slot's port reserved (bound, never listening:
        # agent.cc's ReserveRingSlots); this process listens on it beside.
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        end = time.monotonic() + timeout_s
        while True:
            try:
                self.sock.bind(_split(address))
                break
            except OSError as e:
                # The slot's previous process may not have let go of it yet.
                if e.errno != errno.EADDRINUSE or time.monotonic() > end:
                    self.sock.close()
                    raise RingError("ring: cannot listen at %s (%s)" % (address, e))
                time.sleep(0.01)
        self.sock.listen(64)
        self.early = {}  # (nonce, rank) -> socket: a HELLO from a generation ahead

    def close(self):
        self.sock.close()
        for s in self.early.values():
            s.close()
        self.early.clear()


class Ring:
    """One generation's ring: rank r sends to r + 1 and hears r - 1 (mod W).

    `interrupt` is (fd, asked): a wait also ends when fd is readable and
    asked() says the generation is over (the agent's INJECT abort on the
    rank link), so a frozen peer, which sends neither data nor EOF, does
    not hold the survivors until the timeout."""

    def __init__(self, listener, plan_text, rank, world, timeout_s=30.0, interrupt=None):
        self.rank, self.world, self.timeout_s = rank, world, timeout_s
        self.nonce, self.who = decode_plan(plan_text)
        self._interrupt = interrupt
        self._seq = 0
        self.send_sock = self.recv_sock = None
        self.form_ms = 0.0
        if world == 1:
            return
        t0 = time.monotonic()
        end = t0 + timeout_s
        succ, pred = (rank + 1) % world, (rank - 1) % world
        for r in (succ, pred):
            if r not in self.who:
                raise RingError("ring: the plan names no address for rank %d (of %d)" % (r, world))
        try:
            self.send_sock = self._dial(self.who[succ], end)
            self.recv_sock = self._accept(listener, pred, end)
        except Exception:
            self.close()
            raise
        for s in (self.send_sock, self.recv_sock):
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            s.setblocking(False)
        self.form_ms = (time.monotonic() - t0) * 1000.0

    # --- forming ---------------------------------------------------------

    def _dial(self, address, end):
        while True:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                s.settimeout(max(0.05, min(1.0, end - time.monotonic())))
                s.connect(_split(address))
                s.sendall(_HELLO.pack(_MAGIC, self.nonce, self.rank, self.world))
                s.settimeout(None)
                return s
            except OSError as e:
                s.close()
                # A new process (a spare, a joiner) may not listen yet.
                if time.monotonic() > end:
                    raise RingError("ring: peer lost: rank %d cannot reach its successor at %s (%s)"
                                    % (self.rank, address, e))
                self._check_interrupt()
                time.sleep(0.005)

    def _accept(self, listener, pred, end):
        key = (self.nonce, pred)
        if key in listener.early:
            return listener.early.pop(key)
        while True:
            self._wait([listener.sock], [], end, "its predecessor's link (rank %d)" % pred)
            s, _ = listener.sock.accept()
            hello = _read_exactly(s, _HELLO.size, end)
            if hello is None:
                s.close()
                continue
            magic, nonce, r, _ = _HELLO.unpack(hello)
            if magic != _MAGIC:
                s.close()
                continue
            if (nonce, r) == key:
                return s
            if nonce != self.nonce:  # another generation's: keep it for when this rank gets there
                old = listener.early.pop((nonce, r), None)
                if old is not None:
                    old.close()
                listener.early[(nonce, r)] = s
                _forget_old(listener)
            else:
                s.close()

    # --- collectives -----------------------------------------------------

    def all_reduce(self, a, op="sum"):
        """In place over the world: `a` a 1-D contiguous numpy array; op
        "sum" or "max". A reduce-scatter, then an all-gather."""
        W = self.world
        if W == 1:
            return a
        n, r = a.shape[0], self.rank
        add = np.add if op == "sum" else np.maximum
        scratch = np.empty(chunk_of(n, 0, W)[1] - chunk_of(n, 0, W)[0] + 1, dtype=a.dtype)
        for k in range(W - 1):  # after it, rank r holds chunk r + 1 reduced
            s0, s1 = chunk_of(n, (r - k) % W, W)
            g0, g1 = chunk_of(n, (r - k - 1) % W, W)
            into = scratch[: g1 - g0]
            self._exchange(a[s0:s1], into)
            add(a[g0:g1], into, out=a[g0:g1])
        for k in range(W - 1):
            s0, s1 = chunk_of(n, (r + 1 - k) % W, W)
            g0, g1 = chunk_of(n, (r - k) % W, W)
            self._exchange(a[s0:s1], a[g0:g1])
        return a

    def broadcast(self, data, root):
        """`data` (bytes) from `root` to every rank, relayed along the ring
        in pieces, so the links carry it at once, not one after another."""
        W = self.world
        if W == 1:
            return data
        last = (root - 1) % W  # the rank that relays no further
        piece = 1 << 22
        if self.rank == root:
            size = np.array([len(data)], dtype=np.int64)
            self._send(size)
            view = memoryview(data)
            for at in range(0, len(data), piece):
                self._send(view[at: at + piece])
            return data
        size = np.empty(1, dtype=np.int64)
        self._recv(size)
        if self.rank != last:
            self._send(size)
        out = bytearray(int(size[0]))
        view = memoryview(out)
        for at in range(0, len(out), piece):
            self._recv(view[at: at + piece])
            if self.rank != last:
                self._send(view[at: at + piece])
        return bytes(out)

    def close(self):
        """Ends the generation: the neighbours' waits on this rank fail at
        once (EOF)."""
        for s in (self.send_sock, self.recv_sock):
            if s is not None:
                try:
                    s.close()
                except OSError:
                    pass
        self.send_sock = self.recv_sock = None

    # --- the wire ----------------------------------------------------------

    def _exchange(self, out, into):
        """Sends `out` to the successor while receiving `into` from the
        predecessor: both directions at once, so neither side's socket
        buffer has to hold a whole chunk."""
        self._seq += 1
        head = _HEAD.pack(self.nonce, self._seq)
        rx_head = bytearray(_HEAD.size)
        # An empty chunk (a buffer shorter than the world) sends its header only.
        tx = [v for v in (memoryview(head), _bytes(out)) if len(v)]
        rx = [v for v in (memoryview(rx_head), _bytes(into)) if len(v)]
        self._transfer(tx, rx)
        if _HEAD.unpack(bytes(rx_head)) != (self.nonce, self._seq):
            self.close()
            raise RingError("ring: peer lost: rank %d's predecessor is out of step" % self.rank)

    def _send(self, out):
        self._transfer([v for v in (_bytes(out),) if len(v)], [])

    def _recv(self, into):
        self._transfer([], [v for v in (_bytes(into),) if len(v)])

    def _transfer(self, tx, rx):
        """Writes the pieces `tx` to the successor and fills `rx` from the
        predecessor, whichever socket is ready first. A failure closes both
        links (the neighbours' waits end at once) and raises RingError."""
        end = time.monotonic() + self.timeout_s
        try:
            while tx or rx:
                wr, ww = ([self.recv_sock] if rx else []), ([self.send_sock] if tx else [])
                readable, writable = self._wait(wr, ww, end, "its neighbours")
                if writable:
                    tx = _send_some(self.send_sock, tx)
                if readable:
                    rx = _recv_some(self.recv_sock, rx)
        except RingError:
            self.close()
            raise
        except OSError as e:
            self.close()
            raise RingError("ring: peer lost: rank %d's link failed (%s)" % (self.rank, e))

    def _wait(self, rd, wr, end, what):
        extra = [self._interrupt[0]] if self._interrupt else []
        while True:
            left = end - time.monotonic()
            if left <= 0:
                raise RingError("ring: peer lost: rank %d waited %.0f s for %s" % (self.rank, self.timeout_s, what))
            r, w, _ = select.select(rd + extra, wr, [], min(left, 1.0))
            if extra and extra[0] in r:
                self._check_interrupt()
                r = [x for x in r if x is not extra[0]]
            if r or w:
                return r, w

    def _check_interrupt(self):
        if self._interrupt and self._interrupt[1]():
            raise RingError("ring: peer lost: rank %d's agent ended the generation" % self.rank)


def _bytes(a):
    return memoryview(a).cast("B")


def _send_some(sock, pieces):
    n = sock.send(pieces[0])
    rest = pieces[0][n:]
    return ([rest] if len(rest) else []) + pieces[1:]


def _recv_some(sock, pieces):
    n = sock.recv_into(pieces[0])
    if n == 0:
        raise RingError("ring: peer lost: a neighbour closed its link")
    rest = pieces[0][n:]
    return ([rest] if len(rest) else []) + pieces[1:]


def _read_exactly(s, n, end):
    buf = bytearray()
    while len(buf) < n:
        s.settimeout(max(0.01, end - time.monotonic()))
        try:
            got = s.recv(n - len(buf))
        except OSError:
            return None
        if not got:
            return None
        buf += got
    s.settimeout(None)
    return bytes(buf)


def _forget_old(listener):
    """At most a few early HELLOs are kept: the newest generations'."""
    if len(listener.early) > 16:
        for key in sorted(listener.early)[: len(listener.early) - 16]:
            listener.early.pop(key).close()
