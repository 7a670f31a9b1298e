"""Vision: read_file sends images to models that see them, refuses otherwise; resizing; @image parts."""

from __future__ import annotations

import base64
import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from kimicode.testing import FakeServer, Reply, ToolCall
from kimicode.tools import images
from kimicode.tools.base import ToolError
from kimicode.tools.images import image_part, images_message, load_image, user_content


def make_png(path: Path, size: tuple[int, int], color: tuple[int, int, int] = (200, 30, 30)) -> bytes:
    img = Image.new("RGB", size, color)
    img.putpixel((0, 0), (1, 2, 3))
    img.save(path, format="PNG")
    return path.read_bytes()


def decode(part: dict[str, Any]) -> tuple[str, bytes]:
    url = part["image_url"]["url"]
    head, b64 = url.split(",", 1)
    return head, base64.b64decode(b64)


def test_read_file_sends_the_image_after_the_tool_results(
    make_agent: Callable[..., Any], server: FakeServer, workspace: Path
) -> None:
    raw = make_png(workspace / "shot.png", (64, 32))
    (workspace / "notes.txt").write_text("text file\n")
    server.add(
        Reply(tool_calls=[ToolCall("read_file", {"path": "shot.png"}), ToolCall("read_file", {"path": "notes.txt"})]),
        Reply(content="a red rectangle"),
    )
    agent = make_agent(model="kimi-k3")
    result = agent.run_sync("what is in shot.png?")
    assert result.ok
    sent = server.requests[1].body["messages"]
    roles = [m["role"] for m in sent]
    assert roles[-3:] == ["tool", "tool", "user"]  # both results first, then the images
    assert "attached below" in sent[-3]["content"] and "64x32" in sent[-3]["content"]
    assert "text file" in sent[-2]["content"]
    content = sent[-1]["content"]
    assert content[0]["type"] == "text" and "read_file" in content[0]["text"]
    head, data = decode(content[1])
    assert head == "data:image/png;base64" and data == raw  # small enough: sent untouched
    assert agent.messages[-2]["content"] == content  # it is part of the history (and the context budget)


def test_models_without_vision_get_a_clear_refusal(
    make_agent: Callable[..., Any], server: FakeServer, workspace: Path, tmp_path: Path
) -> None:
    make_png(workspace / "a.png", (8, 8))
    server.add(Reply(tool_calls=[ToolCall("read_file", {"path": "a.png"})]), Reply(content="ok"))
    agent = make_agent(model="deepseek-chat")
    agent.run_sync("look")
    result = server.requests[1].body["messages"][-1]
    assert result["role"] == "tool" and "cannot see images" in result["content"]
    assert "deepseek-chat" in result["content"]
    cfg = tmp_path / "home" / "config.toml"
    cfg.parent.mkdir(parents=True, exist_ok=True)
    cfg.write_text("[models.deepseek-chat]\nsupports_images = true\n")
    server.add(Reply(tool_calls=[ToolCall("read_file", {"path": "a.png"})]), Reply(content="ok"))
    make_agent(model="deepseek-chat").run_sync("look")
    assert server.requests[3].body["messages"][-1]["role"] == "user"  # configured to see images


def test_large_images_are_scaled_down_to_the_configured_limits(
    make_agent: Callable[..., Any], server: FakeServer, workspace: Path, tmp_path: Path
) -> None:
    make_png(workspace / "big.png", (3000, 1000))
    cfg = tmp_path / "home" / "config.toml"
    cfg.parent.mkdir(parents=True, exist_ok=True)
    cfg.write_text("[images]\nmax_side = 600\n")
    server.add(Reply(tool_calls=[ToolCall("read_file", {"path": "big.png"})]), Reply(content="ok"))
    agent = make_agent()
    agent.run_sync("look")
    sent = server.requests[1].body["messages"]
    assert "scaled down from 3000x1000" in sent[-2]["content"]
    head, data = decode(sent[-1]["content"][1])
    with Image.open(io.BytesIO(data)) as img:
        assert img.size == (600, 200)
    assert head == "data:image/jpeg;base64"  # opaque: re-encoded as JPEG
    without = [m for m in agent.messages if not isinstance(m.get("content"), list)]
    tokens = agent.context.estimate(agent.messages) - agent.context.estimate(without)
    assert 100 < tokens < 1000  # counted by its dimensions, not by the length of its base64 text


def test_byte_limit_and_transparency(workspace: Path) -> None:
    img = Image.new("RGBA", (400, 400), (0, 0, 0, 0))
    for x in range(400):
        img.putpixel((x, x), (x % 256, 255 - x % 256, 7, 255))
    img.save(workspace / "t.png")
    loaded = load_image(workspace / "t.png", "t.png", max_side=2048, max_bytes=800)
    assert loaded.mime == "image/png" and len(loaded.data) <= 800 and loaded.width < 400
    assert loaded.original is not None and loaded.original[:2] == (400, 400)


def test_bad_image_files(workspace: Path) -> None:
    (workspace / "fake.png").write_text("not an image at all")
    with pytest.raises(ToolError, match="not a PNG, JPEG, GIF or WebP"):
        load_image(workspace / "fake.png", "fake.png")
    with pytest.raises(ToolError, match="file not found"):
        image_part(workspace / "missing.png")


def test_without_pillow_small_images_pass_and_large_ones_are_refused(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(images, "_pillow", lambda: None)
    raw = make_png(workspace / "s.png", (30, 20))
    loaded = load_image(workspace / "s.png", "s.png")
    assert (loaded.width, loaded.height, loaded.data) == (30, 20, raw)
    make_png(workspace / "l.png", (300, 20))
    with pytest.raises(ToolError, match="Pillow is not installed"):
        load_image(workspace / "l.png", "l.png", max_side=100)


def test_helpers_for_mentions(workspace: Path) -> None:
    raw = make_png(workspace / "m.png", (10, 10))
    part = image_part(workspace / "m.png")
    assert decode(part) == ("data:image/png;base64", raw)
    assert user_content("hello", []) == "hello"
    content = user_content("look at @m.png", [part])
    assert isinstance(content, list) and content[0] == {"type": "text", "text": "look at @m.png"}
    msg = images_message([("call_1", "read_file", [part])])
    assert msg["role"] == "user" and "read_file (call_1)" in msg["content"][0]["text"]


def test_attach_image_to_the_next_prompt(make_agent: Callable[..., Any], server: FakeServer, workspace: Path) -> None:
    from kimicode.agent.ecosystem import attach_image

    raw = make_png(workspace / "ui.png", (20, 10))
    server.add(Reply(content="a button"), Reply(content="plain"))
    agent = make_agent(model="kimi-k3")
    attach_image(agent, "ui.png")
    assert agent.run_sync("what is in @ui.png?").ok
    content = server.requests[0].body["messages"][-1]["content"]
    assert content[0] == {"type": "text", "text": "what is in @ui.png?"}
    assert decode(content[1]) == ("data:image/png;base64", raw)
    agent.run_sync("and now?")  # attachments are used once
    assert server.requests[1].body["messages"][-1]["content"] == "and now?"
    blind = make_agent(model="deepseek-chat")
    with pytest.raises(ToolError, match="cannot see images"):
        attach_image(blind, "ui.png")
