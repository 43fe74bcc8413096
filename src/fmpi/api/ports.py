"""Ports: ``Open_port``/``Close_port``, ``Intracomm.Accept``/``Connect`` and ``Comm.Join`` (MPI's client/server).

Two groups that share no communicator meet at the relay their ranks use, which may serve two jobs:

* a port name is ``fmpi-port:<id>:<secret>``; the secret is the token of the jobs met through it, so
  only a holder of the name can connect (a stranger on a shared relay cannot);
* the accepting root makes a two-slot *meeting* job (``port-<id>``) and joins it as slot 0; the
  connecting root joins it as slot 1 (trying again until it exists: either may come first). Over it the
  connecting root says its group's size, and the accepting root makes the job both groups will share
  and answers with it; then both leave the meeting, which ends;
* each root hands that job to its group, and every process joins it as a spawn's parents and children
  do (``rank/spawn.py``): the accepting group in the first slots, the connecting group after them. The
  intercommunicator lives on that job's transport and is left at ``Disconnect``.

``Comm.Join(fd)`` does the same with a connected socket in place of the meeting: the two processes swap
random numbers over it, the larger makes the job and writes it to the other.

A server may publish its port under a service name for clients to look up (``Publish_name``,
``Lookup_name``, ``Unpublish_name``): the relay the job uses keeps the names, for as long as the
publishing job runs (``names.py``).
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import struct
import time
from typing import Any

from ..rank import spawn as spawning
from ..rank.join import join
from ..rank.spec import RankSpec, SpecError
from ..wire.errors import RelayError
from . import exceptions as err
from . import runtime
from .intercomm import Intercomm
from .intracomm import Intracomm
from .spawn import PARENT_CONTEXT

PREFIX = "fmpi-port:"
#: Seconds an Accept waits for its connecting group (MPI's Accept blocks; a meeting job needs a bound).
ACCEPT_TIMEOUT = 24 * 3600.0
#: Seconds a Connect keeps trying to find its port's Accept.
CONNECT_TIMEOUT = 60.0


def open_port() -> str:
    """A new port name, at which this process's Accept can be reached by a Connect given the name."""
    _session("Open_port")
    port = f"{PREFIX}{secrets.token_hex(8)}:{secrets.token_hex(16)}"
    runtime.state.ports.add(port)
    return port


def close_port(port: str) -> None:
    if port not in runtime.state.ports:
        raise err.Exception(err.ERR_PORT, f"Close_port: {port!r} is not a port this process opened")
    runtime.state.ports.discard(port)


def accept(comm: Intracomm, port: Any, root: int) -> Intercomm:
    """Collective over `comm`: wait at `port` (significant at the root) for a group's Connect."""
    return _meet(comm, port, root, accepting=True)


def connect(comm: Intracomm, port: Any, root: int) -> Intercomm:
    """Collective over `comm`: join the group accepting at `port` (significant at the root)."""
    return _meet(comm, port, root, accepting=False)


def _meet(comm: Intracomm, port: Any, root: int, accepting: bool) -> Intercomm:
    root = comm._root(root)
    plan: Any = None
    if comm.rank == root:
        try:
            plan = _meet_at_root(port, comm.size, accepting)
        except (RelayError, SpecError, OSError, ValueError, err.Exception) as exc:
            # (also the meeting's own failures, e.g. the other root died in it: the group must hear of it)
            plan = f"{'Accept' if accepting else 'Connect'}: {exc}"
    plan = comm.bcast(plan, root)
    if isinstance(plan, str):
        comm._fail(err.ERR_PORT, plan)
    inter = _intercomm(plan, comm.rank if accepting else plan.parents + comm.rank, accepting)
    inter._errhandler = comm._errhandler
    return inter


def _meet_at_root(port: Any, size: int, accepting: bool) -> spawning.SpawnedJob:
    """The job both groups will share, agreed over the port's meeting job (see the module docstring)."""
    session = _session("Accept" if accepting else "Connect")
    if not isinstance(port, str) or not port.startswith(PREFIX) or port.count(":") != 2:
        raise ValueError(f"{port!r} is not a port name from Open_port")
    port_id, token = port[len(PREFIX):].split(":")
    relay = session.spec.relay
    meeting = RankSpec(f"port-{port_id}", 0 if accepting else 1, 2, relay, token,
                       fill_timeout=ACCEPT_TIMEOUT if accepting else CONNECT_TIMEOUT)
    if not accepting:
        link = _join_meeting(meeting)
        try:
            talk = Intracomm(link.engine, (0, 1), 0)
            talk.send(size, 0)
            shared = talk.recv(source=0)
            talk.send("got it", 0)  # (the accepting root ends the meeting only once this side is done)
        finally:
            link.finalize(0)
        return shared
    control = spawning.create_meeting(relay, meeting.job, token, ACCEPT_TIMEOUT)
    try:
        link = join(meeting)
        try:
            talk = Intracomm(link.engine, (0, 1), 0)
            shared = _create_shared(relay, size, talk.recv(source=1))
            talk.send(shared, 1)
            talk.recv(source=1)
        finally:
            link.finalize(0)
    finally:
        control.end()
    return shared


def _join_meeting(meeting: RankSpec) -> Any:
    """The connecting root's seat in the meeting: the Accept may not have made it yet, so try again."""
    deadline = time.monotonic() + CONNECT_TIMEOUT
    while True:
        try:
            return join(meeting)
        except RelayError as exc:
            # No meeting yet, or another group's Connect holds the seat: wait for the port's next Accept.
            # Anything else (a wrong secret above all) is final.
            if exc.code not in ("unknown_job", "duplicate"):
                raise
            if time.monotonic() > deadline:
                raise RelayError(f"no Accept at the port within {CONNECT_TIMEOUT:g} s ({exc})") from None
            time.sleep(0.2)


def _intercomm(shared: spawning.SpawnedJob, slot: int, first: bool) -> Intercomm:
    """This process's side of the intercommunicator on the shared job: the first group or the second."""
    try:
        session = join(shared.spec(slot))
    except (RelayError, SpecError, OSError) as exc:
        raise err.Exception(err.ERR_PORT, f"the groups did not meet: {exc}") from None
    runtime.state.spawned.append(session)
    first_group, second_group = tuple(range(shared.parents)), tuple(range(shared.parents, session.size))
    local, remote = (first_group, second_group) if first else (second_group, first_group)
    inter = Intercomm(session.engine, local, PARENT_CONTEXT, "", remote)
    inter._session = session  # (left at Disconnect)
    return inter


def _create_shared(relay: str, first: int, second: int) -> spawning.SpawnedJob:
    shared, holder = spawning.create_job(relay, first, second)
    runtime.state.children.append(holder)  # (the job ends when this process finalizes)
    return shared


def join_socket(fd: int) -> Intercomm:
    """``Comm.Join``: the process at the other end of the connected socket `fd` becomes the remote group."""
    session = _session("Join")
    sock = socket.socket(fileno=os.dup(fd))
    try:
        mine = secrets.randbits(64)
        sock.sendall(struct.pack("!Q", mine))
        theirs = struct.unpack("!Q", _read(sock, 8))[0]
        if mine == theirs:
            raise err.Exception(err.ERR_OTHER, "Join: both ends drew the same number (try again)")
        if mine > theirs:
            shared = _create_shared(session.spec.relay, 1, 1)
            body = json.dumps(shared.__dict__).encode()
            sock.sendall(struct.pack("!I", len(body)) + body)
        else:
            size = struct.unpack("!I", _read(sock, 4))[0]
            shared = spawning.SpawnedJob(**json.loads(_read(sock, size)))
    except OSError as exc:
        raise err.Exception(err.ERR_OTHER, f"Join: the socket failed: {exc}") from None
    finally:
        sock.close()
    return _intercomm(shared, 0 if mine > theirs else 1, mine > theirs)


def _read(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise OSError("the other end closed the socket")
        data += chunk
    return data


def _session(call: str) -> Any:
    session = runtime.state.session
    if session is None:
        raise err.Exception(err.ERR_PORT, f"{call}: this process is not an fmpi rank (run it under fmpirun): "
                                          "there is no relay to meet at")
    return session
