"""How the ssh provider reaches its hosts: one ``ssh`` command per step through the system's
OpenSSH (batch mode, one multiplexed control master per host, keep-alives so a vanished host ends
its step instead of hanging), and the shell steps it sends: start a daemon detached from the
session, stop recorded daemons and the cluster's strays.

Kept apart from the provider (:mod:`hyperscope.cluster.ssh`) because everything that acts on an ssh
host needs it — node operations, updates, the controllers' watchdog, the health loops, an adopted
cluster's loops — and none of them needs the provider's create and delete.

Daemons are recorded with their host, PID and start time; a stop acts on a PID only while its
start time still matches, so a PID the host has since given to another process is never hit.
"""

from __future__ import annotations

import shlex
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from hyperscope.cluster.spec import SshSettings
from hyperscope.cluster.state import ClusterError, ClusterState, Proc

MARKER = "HYPERSCOPE_CLUSTER_DIR"  # as the local provider's: in every daemon's environment
NODE_MARKER = "HYPERSCOPE_SLURMD_NODE"  # in a slurmd's (and so its slurmstepds') environment
#: the env a remote Slurm command gets; the rest of this machine's environment stays here
FORWARDED = ("SLURM_CONF", "HYPERSCOPE_HOME", "HYPERSCOPE_JOB")
_START_TIME = "$(sed 's/.*) //' /proc/$p/stat | cut -d' ' -f20)"
#: stop PID START pairs (only while the start time matches), TERM then KILL after 5 s
_STOP = r"""
stop() { pids=""
  while [ $# -gt 1 ]; do p=$1
    [ "$(sed 's/.*) //' /proc/$p/stat 2>/dev/null | cut -d' ' -f20)" = "$2" ] && kill -TERM $p 2>/dev/null && pids="$pids $p"
    shift 2; done
  for i in $(seq 50); do left=""
    for p in $pids; do s=$(sed 's/.*) //' /proc/$p/stat 2>/dev/null | cut -d' ' -f1); [ -n "$s" ] && [ "$s" != Z ] && left="$left $p"; done
    [ -z "$left" ] && return 0; sleep 0.1; done
  kill -KILL $left 2>/dev/null; return 0; }
strays() { for e in /proc/[0-9]*/environ; do p=${e#/proc/}; p=${p%/environ}
    case " $KEEP " in *" $p "*) continue;; esac
    case " $KEEP " in *" $(cut -d' ' -f4 /proc/$p/stat 2>/dev/null) "*) continue;; esac
    if grep -qzxF "$1" $e 2>/dev/null || { grep -qzxF "$2" $e 2>/dev/null && grep -qz '^SLURM_JOB_ID=' $e; }
    then echo $p $(sed 's/.*) //' /proc/$p/stat | cut -d' ' -f20); fi; done; }
"""  # noqa: E501


def settings(state: ClusterState) -> SshSettings:
    raw = dict(state.ssh)
    key = raw.get("identity_file")
    return SshSettings(
        user=str(raw["user"]), port=int(str(raw["port"])), identity_file=Path(str(key)) if key else None,
        options=tuple(str(o) for o in raw.get("options") or ()), remote_dir=str(raw["remote_dir"]),
        python=str(raw.get("python") or ""),
    )  # fmt: skip


def ssh_argv(s: SshSettings, host: str, command: str) -> list[str]:
    """The OpenSSH command line for one remote step: batch mode (never a password prompt), one
    multiplexed connection per host (a cluster's create runs dozens of steps), the spec's options."""
    argv = ["ssh", "-p", str(s.port)]
    # ServerAlive*: a host whose link is gone ends its connection (status 255) within ~15 s, so
    # a step fails over (``runner``) instead of hanging on the multiplexed connection
    for option in ("BatchMode=yes", f"ConnectTimeout={CONNECT_TIMEOUT_S}", "LogLevel=ERROR",
                   "ControlMaster=auto", "ControlPath=/tmp/hs-ssh-%C", "ControlPersist=60",
                   "ServerAliveInterval=5", "ServerAliveCountMax=3"):  # fmt: skip
        argv += ["-o", option]
    if s.identity_file is not None:
        argv += ["-i", str(s.identity_file)]
    for option in s.options:
        argv += ["-o", option]
    return [*argv, f"{s.user}@{host}", command]


def with_env(env: Mapping[str, str], argv: Sequence[str]) -> str:
    """``env K=V … ARGV`` quoted for the remote shell."""
    return shlex.join(["env", *(f"{k}={v}" for k, v in env.items()), *argv])


def start_command(root: str, log: str, argv: Sequence[str], node: str = "") -> str:
    """Start a daemon detached from the ssh session; prints ``PID START`` (its /proc start time).
    A slurmd's ``node`` is in its environment, inherited by its slurmstepds: how one node's
    processes are found on a host that runs several."""
    env = {MARKER: root, **({NODE_MARKER: node} if node else {})}
    return (  # not `cd && cmd &`: that backgrounds a subshell, and $! would be its PID
        f"cd {shlex.quote(root)} || exit 1; {with_env(env, ['setsid', *argv])} "
        f"> {shlex.quote(f'{root}/log/{log}')} 2>&1 < /dev/null & p=$!; echo $p {_START_TIME}"
    )


def stop_command(procs: Sequence[Proc], *, root: str | None = None, keep: Sequence[Proc] = ()) -> str:
    """Stop ``procs``; with ``root``, also every process carrying the cluster's marker or its
    SLURM_CONF with a job id (slurmstepds, job tasks), except ``keep`` and their children."""
    pairs = " ".join(f"{p.pid} {p.start}" for p in procs)
    script = f"{_STOP}\nstop {pairs}\n"
    if root is not None:
        conf_line = shlex.quote(f"SLURM_CONF={root}/etc/slurm.conf")
        keep_ids = " ".join(str(p.pid) for p in keep)
        script += f"KEEP='{keep_ids}'\nstop $(strays {shlex.quote(f'{MARKER}={root}')} {conf_line})\n"
    return f"bash -c {shlex.quote(script)}"


#: host -> until when Slurm's commands try it after the other controller hosts (ssh said 255)
_AWAY: dict[str, float] = {}
AWAY_S = 30.0
CONNECT_TIMEOUT_S = 10


class Hosts:
    """Runs steps on hosts; every failure names the host, the step and what the host said."""

    def __init__(self, s: SshSettings) -> None:
        self.settings = s

    def run(
        self, host: str, command: str, *, stdin: bytes = b"", timeout: float = 60.0, check: bool = True
    ) -> str:
        try:
            done = subprocess.run(
                ssh_argv(self.settings, host, command),
                input=stdin,
                capture_output=True,
                timeout=timeout,
                check=False,
            )
        except FileNotFoundError as exc:
            raise ClusterError("`ssh` is not installed: apt-get install openssh-client") from exc
        except subprocess.TimeoutExpired as exc:
            raise ClusterError(f"{host}: `{command[:80]}` gave no answer within {timeout:g} s") from exc
        out = done.stdout.decode(errors="replace")
        if check and done.returncode != 0:
            said = (done.stderr.decode(errors="replace") or out).strip()[-2000:] or "(no output)"
            raise ClusterError(f"{host}: `{command[:80]}` failed with status {done.returncode}: {said}")
        return out

    def close(self, host: str) -> None:
        """End the control master of ``host`` (it would linger ControlPersist seconds)."""
        argv = ssh_argv(self.settings, host, "")[:-1]
        subprocess.run([argv[0], "-O", "exit", *argv[1:]], capture_output=True, timeout=10, check=False)

    def runner(
        self, host: str, *fallback: str
    ) -> Callable[[Sequence[str], dict[str, str], float], subprocess.CompletedProcess[str]]:
        """A :class:`Slurm` runner that runs Slurm's commands on ``host``, or on the next of
        ``fallback`` (the backup controller's host) while ssh cannot reach it (status 255)."""

        def run(argv: Sequence[str], env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
            remote = with_env({k: env[k] for k in FORWARDED if k in env}, argv)
            now = time.monotonic()
            # a host found unreachable lately is tried last (each try of it costs a ConnectTimeout)
            for h in sorted((host, *fallback), key=lambda h: _AWAY.get(h, 0.0) > now):
                try:  # the command's own time, plus ssh's ConnectTimeout to reach the host
                    done = subprocess.run(
                        ssh_argv(self.settings, h, remote),
                        capture_output=True,
                        text=True,
                        timeout=timeout + CONNECT_TIMEOUT_S,
                        check=False,
                    )
                except subprocess.TimeoutExpired:  # not tried elsewhere: it may have run there
                    _AWAY[h] = time.monotonic() + AWAY_S
                    raise
                if done.returncode != 255:
                    _AWAY.pop(h, None)
                    break
                _AWAY[h] = time.monotonic() + AWAY_S
            return subprocess.CompletedProcess(list(argv), done.returncode, done.stdout, done.stderr)

        return run
