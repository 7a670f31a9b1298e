"""tests/bench/startup.py runs and prints sane figures, and refuses to time a run that got no answer.

No timing is asserted (see the ground rules): only that figures are printed, are positive, and come
from runs that really received the fake server's reply. Kimi Code itself is not installed in the test
environment, so a small stand-in `kimi` (standard library only) plays it: one that asks the fake server
as Kimi Code would, and one that prints the reply without asking, which the bench must reject.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from helpers import ROOT

BENCH = ROOT / "tests" / "bench" / "startup.py"
FIGURE = re.compile(r"^\s{2}(?P<name>\S.*?)\s+(?P<median>\d+\.\d) ms\s+(?P<min>\d+\.\d) ms", re.M)

ASKS_THE_SERVER = r"""
import json, sys, urllib.request
args = sys.argv[1:]
if args == ["--version"]:
    print("kimi, version stand-in")
    sys.exit(0)
config = json.loads(args[args.index("--config") + 1])
provider = config["providers"][config["models"][config["default_model"]]["provider"]]
prompt = [{"type": "text", "text": args[args.index("-p") + 1]}]
body = {"model": "kimi-k3", "messages": [{"role": "user", "content": prompt}]}
headers = {"Content-Type": "application/json", "Authorization": "Bearer " + provider["api_key"]}
request = urllib.request.Request(provider["base_url"] + "/chat/completions", data=json.dumps(body).encode(),
                                 headers=headers)
with urllib.request.urlopen(request, timeout=30) as response:
    print(json.load(response)["choices"][0]["message"]["content"])
"""

ANSWERS_WITHOUT_ASKING = r"""
import sys
print("kimi, version stand-in" if sys.argv[1:] == ["--version"] else "hello from the fake server")
"""


def stand_in(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "kimi"
    path.write_text(f"#!{sys.executable}\n" + textwrap.dedent(body), encoding="utf-8")
    path.chmod(0o755)
    return path


def bench(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    return subprocess.run([sys.executable, str(BENCH), *args], env=env, cwd=ROOT, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=240, check=False)  # fmt: skip


def figures(out: str) -> dict[str, tuple[float, float]]:
    return {m["name"]: (float(m["median"]), float(m["min"])) for m in FIGURE.finditer(out)}


@pytest.mark.slow
def test_kimicode_only_prints_its_figures_and_how_to_compare() -> None:
    proc = bench("2")
    assert proc.returncode == 0, proc.stderr
    got = figures(proc.stdout)
    assert set(got) == {
        "python -c pass",
        "kimicode --version",
        "kimicode --help",
        "kimicode -p hi",
        "openai SDK script hi",
    }, proc.stdout
    for name, (median, least) in got.items():
        assert 0 < least <= median < 120_000, (name, proc.stdout)
    assert "all 6 runs (warm-ups included) printed the fake reply" in proc.stdout
    assert "pass --kimi-code PATH" in proc.stdout
    assert "Kimi Code /" not in proc.stdout
    version = re.search(
        r"kimicode --version / python -c pass: (\d+\.\d\d)x; target <= 1\.5x: (met|MISSED)", proc.stdout
    )
    floor = re.search(
        r"kimicode -p / openai SDK script: median (\d+\.\d\d)x, .*target <= 1\.2x: (met|MISSED)", proc.stdout
    )
    assert version and floor, proc.stdout
    expected = got["kimicode -p hi"][0] / got["openai SDK script hi"][0]
    assert float(floor[1]) == pytest.approx(expected, rel=0.05, abs=0.02)


@pytest.mark.slow
def test_side_by_side_prints_both_and_the_ratio(tmp_path: Path) -> None:
    proc = bench("1", "--kimi-code", str(stand_in(tmp_path, ASKS_THE_SERVER)))
    assert proc.returncode == 0, proc.stderr
    got = figures(proc.stdout)
    assert {"kimicode -p hi", "kimi --quiet -p hi"} <= set(got), proc.stdout
    assert "all 6 runs (warm-ups included) printed the fake reply" in proc.stdout
    ratio = re.search(r"kimicode / Kimi Code \(kimi, version stand-in\): median (\d+\.\d\d)x, "
                      r"min (\d+\.\d\d)x, CPU \d+\.\d\dx; target <= 0\.6x: (met|MISSED)", proc.stdout)  # fmt: skip
    assert ratio, proc.stdout
    expected = got["kimicode -p hi"][0] / got["kimi --quiet -p hi"][0]
    assert float(ratio[1]) == pytest.approx(expected, rel=0.05, abs=0.02)
    assert "pass --kimi-code PATH" not in proc.stdout


@pytest.mark.slow
def test_an_answer_that_did_not_come_from_the_fake_server_is_a_failure_not_a_time(tmp_path: Path) -> None:
    proc = bench("1", "--kimi-code", str(stand_in(tmp_path, ANSWERS_WITHOUT_ASKING)))
    assert proc.returncode == 1, proc.stdout
    assert "startup bench FAILED: kimi --quiet -p: the fake server saw no request" in proc.stderr
    assert not figures(proc.stdout), proc.stdout


def test_a_kimi_code_path_that_is_not_an_executable_is_a_clear_error(tmp_path: Path) -> None:
    proc = bench("1", "--kimi-code", str(tmp_path / "nowhere" / "kimi"))
    assert proc.returncode == 2
    assert "--kimi-code" in proc.stderr and "not an executable file" in proc.stderr
    assert "Traceback" not in proc.stderr
