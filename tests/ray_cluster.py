"""A two-node Ray cluster on this machine's loopback, started with the `ray start` command line (tests only).

`ray start --head --node-ip-address 127.0.0.1` then `ray start --address 127.0.0.1:PORT`, each node one CPU,
in a temporary directory of their own. Two settings keep it on 127.0.0.1, never the machine's interface
address: `RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0` for the head and the driver (else Ray replaces 127.0.0.1 by
the address it would be reached at from elsewhere), and, for the second node (where that setting would
refuse to add a node), `ray start` run with that replacement turned off. `RAY_AUTH_MODE=disabled`: the
token Ray 2.5x enables by default is not shared with the second node. Stopping kills the cluster's own
processes by id (those started under its directory, and their children), never other Ray instances.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from helpers import free_port

LOOPBACK_ENV = {"RAY_AUTH_MODE": "disabled", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}

SECOND_NODE = """
import sys
import ray._private.services as services
services.resolve_ip_for_localhost = lambda host: host  # keep 127.0.0.1 as given
from ray.scripts.scripts import main
sys.argv = ["ray", "start", "--address", sys.argv[1], "--node-ip-address", "127.0.0.1", "--num-cpus", "1",
            "--disable-usage-stats"]
main()
"""


class LoopbackCluster:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.temp = root / "ray"
        self.address = f"127.0.0.1:{free_port()}"

    def start(self) -> None:
        env = {**os.environ, **LOOPBACK_ENV}
        ray = str(Path(sys.executable).parent / "ray")
        head = [
            ray if os.path.exists(ray) else "ray",
            "start",
            "--head",
            "--node-ip-address",
            "127.0.0.1",
            "--port",
            self.address.rsplit(":", 1)[1],
            "--num-cpus",
            "1",
            "--include-dashboard",
            "false",
            "--disable-usage-stats",
            "--temp-dir",
            str(self.temp),
        ]
        second = {**env, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "1"}
        for argv, environ in ((head, env), ([sys.executable, "-c", SECOND_NODE, self.address], second)):
            proc = subprocess.run(argv, env=environ, capture_output=True, text=True, timeout=120)
            if proc.returncode != 0:
                raise RuntimeError(f"{' '.join(argv[:3])} failed: {proc.stderr[-600:]}")

    def pids(self) -> list[int]:
        """The cluster's processes: those naming its directory, and their descendants."""
        procs: dict[int, tuple[int, str]] = {}
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            procs[int(entry.name)] = (ppid, cmd)
        ours = {pid for pid, (_, cmd) in procs.items() if str(self.temp) in cmd}
        grew = True
        while grew:
            more = {pid for pid, (ppid, _) in procs.items() if ppid in ours} - ours
            ours |= more
            grew = bool(more)
        return sorted(ours - {os.getpid()})

    def stop(self) -> None:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for pid in self.pids():
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            time.sleep(1.0 if sig == signal.SIGTERM else 0)
