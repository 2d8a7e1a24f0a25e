"""Warm restarts: one process, many generations of the job.

A job restarts (a rank was killed, a machine evicted) and by default every
rank is a new process: a new interpreter, `import torch`, the model built
again. Under `bulwark.run(train)` the process stays. Its agent hands it the
next generation's rank and rendezvous over the rank link, the same
protocol bulwark-train speaks (src/rank_client/rank_link.h):

    rank -> agent                 agent -> rank
    INPLACE   this process can wait for an ASSIGN
    LOST <step>   a collective failed; waiting     ASSIGN <generation> <rank> <local rank>
    READY     a pre-spawned spare, set up              <world> <local world> <master addr>
                                                       <master port> <backup of> <log> [...]

`train` forms its process group from the environment (init_process_group,
env://), restores, trains, and returns. When a collective fails because a
peer is gone, `run` ends the failed group, says LOST and waits for the
agent's ASSIGN; it puts the new RANK, WORLD_SIZE, MASTER_ADDR and
MASTER_PORT in the environment, and calls `train` again, which restores
from the agent's memory. What the script did before `run` (imports, data,
a model built at module level) is kept. The agent also starts one spare of
the job per local rank ahead of need (BULWARK_PRESPAWN=1): it runs the
script up to `run`, says READY and waits; a restart hands it the rank of a
process that died.

Outside bulwark, `run` calls `train` once, and a lost peer ends the
process with EXIT_PEER_LOST as `peer_loss_exits` does.
"""

import collections
import json
import os
import socket
import sys
import time

__all__ = ["run", "Assignment", "PRESPAWN_ENV", "ASSIGN_WAIT_S"]

PRESPAWN_ENV = "BULWARK_PRESPAWN"
SHARD_BACKUP_OF_ENV = "BULWARK_SHARD_BACKUP_OF"
RING_ADDR_ENV = "BULWARK_RING_ADDR"
RING_PLAN_ENV = "BULWARK_RING_PLAN"
# How long a rank whose peer is gone waits for the next generation, as
# bulwark-train (train.cc: kAssignWaitMs): the agent answers within its
# echo hold, or ends the process itself.
ASSIGN_WAIT_S = 120.0

Assignment = collections.namedtuple(
    "Assignment", "generation rank local_rank world_size local_world_size master_addr master_port backup_of "
    "log_path ring_addr ring_plan")
Assignment.__doc__ = "A generation's rank for this process (rank_client::RankAssignment)."


def parse_assignment(line):
    """An ASSIGN (or SPLICE) line as an Assignment; ValueError names what is wrong."""
    w = line.split()
    if len(w) not in (10, 12) or w[0] not in ("ASSIGN", "SPLICE"):
        raise ValueError("rank link: malformed assignment %r" % line[:80])
    ring = (w[10], w[11]) if len(w) == 12 else ("-", "-")
    a = Assignment(int(w[1]), int(w[2]), int(w[3]), int(w[4]), int(w[5]), w[6], int(w[7]), int(w[8]), w[9],
                   "" if ring[0] == "-" else ring[0], "" if ring[1] == "-" else ring[1])
    if a.world_size < 1 or not 0 <= a.rank < a.world_size or not 0 < a.master_port < 65536:
        raise ValueError("rank link: assignment out of range %r" % line[:80])
    return a


def adopt(a):
    """Becomes `a`'s rank: the torchrun variables a new process would get,
    and its rank's log as stdout and stderr (a spare wrote to its own)."""
    env = os.environ
    env.update({"RANK": str(a.rank), "LOCAL_RANK": str(a.local_rank), "WORLD_SIZE": str(a.world_size),
                "LOCAL_WORLD_SIZE": str(a.local_world_size), "MASTER_ADDR": a.master_addr,
                "MASTER_PORT": str(a.master_port), "TORCHELASTIC_RESTART_COUNT": str(max(0, a.generation - 1))})
    if a.ring_addr and a.ring_plan:
        env[RING_ADDR_ENV], env[RING_PLAN_ENV] = a.ring_addr, a.ring_plan
    else:
        env.pop(RING_ADDR_ENV, None)
        env.pop(RING_PLAN_ENV, None)
    if a.backup_of >= 0:
        env[SHARD_BACKUP_OF_ENV] = str(a.backup_of)
    else:
        env.pop(SHARD_BACKUP_OF_ENV, None)
    if a.log_path and a.log_path != "-":
        sys.stdout.flush()
        sys.stderr.flush()
        fd = os.open(a.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)


def _end_generation():
    """The failed world goes: its sockets close (peers still inside a
    collective fail at once), and the in-memory checkpoint's connection,
    which names this generation's rank and world, is dropped."""
    import bulwark
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        try:
            dist.destroy_process_group()
        except Exception as e:  # a group that failed may refuse; the next init replaces it
            sys.stderr.write("bulwark: ending the failed process group: %s\n" % e)
    bulwark._forget_memory()


def _say(text):
    sys.stderr.write("bulwark: %s\n" % text)
    sys.stderr.flush()


def run(train, *args, **kwargs):
    """Calls train(*args, **kwargs) once per generation of the job, in this
    process, and returns what the last call returned (see the top of this
    file). Errors other than a lost peer pass through."""
    import bulwark
    link = bulwark.link()
    if link is None:
        with bulwark.peer_loss_exits():
            return train(*args, **kwargs)
    if os.environ.get(PRESPAWN_ENV):
        # Set up, then idle until the agent needs a rank: what is left of
        # a start is the rendezvous and the restore.
        _warm_lazy_imports()
        print(json.dumps({"event": "spare_ready", "pid": os.getpid(),
                          "setup_ms": round((time.time() - _process_start()) * 1000.0, 1)}), flush=True)
        link.offer_in_place()
        a = link.await_assignment("READY", 0, None)
        if a is None:
            return None  # the agent no longer needs this spare
        _become(link, a, "as a pre-spawned spare")
    else:
        link.offer_in_place()
        env = os.environ
        _say("rank %s of generation %d (world %s), a new process, pid %d" % (
            env.get("RANK", "0"), int(env.get("TORCHELASTIC_RESTART_COUNT", "0")) + 1, env.get("WORLD_SIZE", "1"),
            os.getpid()))
    while True:
        _await_rendezvous()
        try:
            return train(*args, **kwargs)
        except Exception as e:
            if not bulwark.is_peer_lost(e):
                raise
            lost = time.monotonic()
            _say("rank %s: a collective failed, a peer is gone (%s); waiting for the next generation"
                 % (os.environ.get("RANK", "?"), str(e).splitlines()[0][:160]))
            _end_generation()
            a = link.await_assignment("LOST", link.last_step or 0, ASSIGN_WAIT_S)
            if a is None:
                _say("no next generation came: exit %d" % bulwark.EXIT_PEER_LOST)
                sys.stdout.flush()
                os._exit(bulwark.EXIT_PEER_LOST)
            _become(link, a, "in place after %.0f ms" % ((time.monotonic() - lost) * 1000.0))


def _warm_lazy_imports():
    """What torch imports on first use, a spare imports before it waits:
    the first DistributedDataParallel of a process imports torch._dynamo,
    2.1 s of a 2-core host's CPU on torch 2.15, which a spare that waits
    for a rank should not pay on the restart's path."""
    if "torch.distributed" in sys.modules or "torch.nn.parallel" in sys.modules:
        try:
            import torch._dynamo  # noqa: F401
        except Exception:  # an older torch without it, or a broken extra: the start pays
            pass


def _await_rendezvous(timeout_s=60.0):
    """Until rank 0's store listens (MASTER_ADDR:MASTER_PORT), for every
    other rank: torch's store client, refused, backs off for hundreds of
    milliseconds before it tries again (0.5-0.7 s measured on torch 2.15),
    which is most of a warm restart. Probing every 10 ms, as bulwark-train
    does (Comm::Connect), makes the join follow the listen at once. Rank 0,
    or no store named: nothing to wait for; time out: the init says why."""
    addr, port = os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT")
    if os.environ.get("RANK", "0") == "0" or not addr or not port:
        return
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        try:
            socket.create_connection((addr, int(port)), timeout=1.0).close()
            return
        except (OSError, ValueError):
            time.sleep(0.01)


def _become(link, a, how):
    adopt(a)
    link.hello(a.rank)
    link.offer_in_place()
    _say("rank %d of generation %d (world %d), %s, pid %d" % (a.rank, a.generation, a.world_size, how, os.getpid()))


def _process_start():
    """When this process started (Linux: /proc/self/stat's start time)."""
    try:
        with open("/proc/self/stat") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return time.time() - uptime + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return time.time()
