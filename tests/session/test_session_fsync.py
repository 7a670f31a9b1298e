"""The session log's fsync runs in a background thread: `sync` returns at once, a record written before a
crash of the process is in the file, `wait_durable` waits for the disk, and a failed fsync is reported."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from kimicode.session.log import SessionLog, SessionWriteError, iter_records


def started_log(directory: Path) -> SessionLog:
    log = SessionLog(directory, "20260101-000000-abcdef123456")
    log.append({"type": "meta", "session_id": log.session_id})
    log.message({"role": "user", "content": "go"})
    return log


def test_records_acknowledged_before_a_kill_are_in_the_file(tmp_path: Path) -> None:
    script = textwrap.dedent(f"""
        import os, signal, sys
        from pathlib import Path
        from kimicode.session.log import SessionLog
        log = SessionLog(Path({str(tmp_path)!r}), "20260101-000000-abcdef123456")
        log.append({{"type": "meta"}})
        log.message({{"role": "user", "content": "go"}})
        for i in range(200):
            log.message({{"role": "assistant", "content": f"step {{i}}"}})
        log.sync()  # returns before the background fsync; the records are already the kernel's
        print("ack", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False)
    assert done.stdout.strip() == "ack" and done.returncode == -9
    records = list(iter_records(tmp_path / "20260101-000000-abcdef123456.jsonl"))
    assert [r["message"]["content"] for r in records if r["type"] == "message"][-1] == "step 199"
    assert len(records) == 202


def test_sync_returns_before_the_fsync_and_wait_durable_waits_for_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    release = threading.Event()
    synced: list[str] = []
    real = os.fsync

    def slow_fsync(fd: int) -> None:
        release.wait(10)
        real(fd)
        synced.append(threading.current_thread().name)

    monkeypatch.setattr(os, "fsync", slow_fsync)
    log = started_log(tmp_path)
    log.sync()  # would block for 10 s if the fsync ran here
    assert synced == [] and log.wait_durable(timeout=0.05) is False
    release.set()
    assert log.wait_durable(timeout=10) is True
    assert len(synced) == 1 and synced[0].startswith("kimicode-fsync")
    log.message({"role": "assistant", "content": "after"})
    log.close()
    assert log.wait_durable(timeout=10) is True and len(synced) == 2  # close fsyncs (and closes) in the background
    lines = [json.loads(line) for line in log.path.read_text().splitlines()]
    assert lines[-1]["message"]["content"] == "after"


def test_a_failed_background_fsync_is_reported_by_the_next_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(fd: int) -> Any:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "fsync", broken)
    log = started_log(tmp_path)
    log.sync()
    with pytest.raises(SessionWriteError, match=r"cannot write the session log .*Input/output error"):
        log.wait_durable(timeout=10)
    log2 = started_log(tmp_path / "other")
    log2.sync()
    with pytest.raises(SessionWriteError, match="Input/output error"):
        for _ in range(1000):  # the fsync thread fails soon; the next record after it reports it
            log2.message({"role": "assistant", "content": "x"})
            time.sleep(0.005)
    assert log2.failed is not None
    log.close()
    log2.close()
