"""Hostile text through the headless printer (kimicode/cli/headless.py): lone surrogates (names that are
not UTF-8), a stream that is not UTF-8 at all, and a known secret next to them."""

from __future__ import annotations

import io
import json
import os

from kimicode.cli.headless import Printer
from kimicode.config.redact import Masker
from kimicode.events import Notice

SECRET = "sk-test-secret-key-0123456789"


def _streams(encoding: str = "utf-8") -> tuple[io.TextIOWrapper, io.TextIOWrapper]:
    out, err = (io.TextIOWrapper(io.BytesIO(), encoding=encoding, errors="strict") for _ in range(2))
    return out, err


def _read(stream: io.TextIOWrapper, encoding: str = "utf-8") -> str:
    stream.flush()
    stream.seek(0)
    return stream.buffer.read().decode(encoding)


def test_a_secret_next_to_a_surrogate_is_masked_in_a_json_line() -> None:
    out, err = _streams()
    printer = Printer("stream-json", out=out, err=err)
    printer.masker = Masker([SECRET])
    name = os.fsdecode(b"\xff" + SECRET.encode() + b"\xfe")
    printer.line({"type": "tool_result", "content": f"{name}\n{SECRET}\udcff"})
    text = _read(out)
    assert SECRET not in text
    assert json.loads(text)["content"] == "\udcff***\udcfe\n***\udcff"


def test_a_text_answer_and_stderr_lines_with_a_surrogate_are_escaped() -> None:
    """(Events and results reach the printer masked already: kimicode/agent/outgoing.py.)"""
    out, err = _streams()
    printer = Printer("text", verbose=True, out=out, err=err)
    printer.event(Notice("could not read caf\udce9", "warning"))
    printer.result({"result": "wrote caf\udce9", "status": "error", "error": "bad caf\udce9"})
    assert _read(out) == "wrote caf\\udce9\n"
    assert _read(err) == "! could not read caf\\udce9\nkimicode: error: bad caf\\udce9\n"
    assert Masker([SECRET]).mask(f"\udcff{SECRET}\udce9") == "\udcff***\udce9"


def test_a_stream_that_is_not_utf8_gets_valid_json_never_a_crash() -> None:
    """PYTHONIOENCODING=ascii, a latin-1 locale: a character the stream cannot encode (é, an emoji, a lone
    surrogate) goes out as its JSON escape, so the line still reads back as the same object."""
    for encoding in ("ascii", "latin-1"):
        out, err = _streams(encoding)
        printer = Printer("stream-json", out=out, err=err)
        obj = {"type": "x", "text": "café ☃ 😀 " + os.fsdecode(b"caf\xe9")}
        printer.line(obj)
        assert json.loads(_read(out, encoding)) == obj
        printer.err.write("kimicode: warning: ☃ " + os.fsdecode(b"caf\xe9") + "\n")
        assert _read(err, encoding).startswith("kimicode: warning: ")
