"""Images for models that see them: read_file on a PNG/JPEG/GIF/WebP, and `@image.png` in a prompt.

How an image reaches the model: chat-completions providers (OpenAI first) reject image parts inside
`tool` messages, so a tool result stays text ("the image is attached below") and the images of a step
follow its tool results in one `user` message made of `image_url` parts with base64 data URLs. Every
OpenAI-compatible endpoint that accepts images accepts that shape.

Images larger than the limits (`[images] max_side` pixels, `max_bytes` bytes) are scaled down with
Pillow before they are sent; without Pillow (an optional import) such images are refused with a clear
message instead. Their context cost is estimated from their dimensions (see `context.accounting`).
"""

from __future__ import annotations

import asyncio
import base64
import io
import stat
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kimicode.config.choices import DEFAULT_IMAGE_MAX_BYTES, DEFAULT_IMAGE_MAX_SIDE
from kimicode.tools.base import Tool, ToolContext, ToolError, ToolResult
from kimicode.tools.fileio import shown_path

MIME_BY_SUFFIX = {".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".gif": "image/gif",
                  ".webp": "image/webp"}  # fmt: skip
DEFAULT_MAX_SIDE = DEFAULT_IMAGE_MAX_SIDE
"""Longest side in pixels sent to the model; larger images are scaled down."""
DEFAULT_MAX_BYTES = DEFAULT_IMAGE_MAX_BYTES
"""Largest encoded image sent to the model; larger ones are re-encoded smaller."""
MAX_INPUT_BYTES = 64 * 1024 * 1024
"""Image files larger than this are not even read."""


@dataclass(frozen=True)
class ImageResult(ToolResult):
    """A tool result that also carries image content parts (sent in a user message after the results)."""

    images: tuple[Mapping[str, Any], ...] = ()


@dataclass(frozen=True)
class LoadedImage:
    """An image ready to send."""

    mime: str
    data: bytes
    width: int
    height: int
    original: tuple[int, int, int] | None = None
    """(width, height, bytes) before it was scaled down, or None when it is sent as it is."""

    def part(self) -> dict[str, Any]:
        """The `image_url` content part with a base64 data URL."""
        url = f"data:{self.mime};base64,{base64.b64encode(self.data).decode('ascii')}"
        return {"type": "image_url", "image_url": {"url": url}}

    def describe(self) -> str:
        text = f"{self.mime}, {self.width}x{self.height}"
        if self.original is not None:
            w, h, n = self.original
            text += f", scaled down from {w}x{h} ({n:,} bytes)"
        return text


def is_image_path(path: str | Path) -> bool:
    """True when the file name has an image suffix read_file sends as an image."""
    return Path(path).suffix.lower() in MIME_BY_SUFFIX


def sniff_mime(head: bytes) -> str | None:
    """The image type from the first bytes (the suffix is not trusted), or None."""
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if head.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if head[:6] in (b"GIF87a", b"GIF89a"):
        return "image/gif"
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "image/webp"
    return None


def _pillow() -> Any:
    try:
        from PIL import Image
    except ImportError:
        return None
    return Image


def load_image(
    path: Path, shown: str, max_side: int = DEFAULT_MAX_SIDE, max_bytes: int = DEFAULT_MAX_BYTES
) -> LoadedImage:
    """Read an image file and scale it down to the limits if needed; raise ToolError when it cannot be sent."""
    try:
        st = path.stat()
        if not stat.S_ISREG(st.st_mode):  # a FIFO or device would block read_bytes for ever
            raise ToolError(f"{shown} is not a regular file (it is a directory, device, socket or pipe)")
        size = st.st_size
        if size > MAX_INPUT_BYTES:
            raise ToolError(f"{shown} is too large to send as an image ({size:,} bytes; limit {MAX_INPUT_BYTES:,})")
        data = path.read_bytes()
    except FileNotFoundError:
        raise ToolError(f"file not found: {shown}") from None
    except OSError as exc:
        raise ToolError(f"cannot read {shown}: {exc.strerror or exc}") from None
    mime = sniff_mime(data[:16])
    if mime is None:
        raise ToolError(f"{shown} is named like an image but is not a PNG, JPEG, GIF or WebP file")
    image_mod = _pillow()
    width = height = 0
    if image_mod is not None:
        try:
            with image_mod.open(io.BytesIO(data)) as img:
                width, height = img.size
        except Exception as exc:  # Pillow raises many types for broken files
            raise ToolError(f"{shown} is not a readable image ({type(exc).__name__}: {exc})") from None
    else:
        width, height = _header_size(data)
    if max(width, height) <= max_side and len(data) <= max_bytes:
        return LoadedImage(mime, data, width, height)
    if image_mod is None:
        raise ToolError(
            f"{shown} ({width}x{height}, {len(data):,} bytes) is larger than the image limits ({max_side} pixels, "
            f"{max_bytes:,} bytes) and cannot be scaled down because Pillow is not installed "
            "(pip install pillow), or raise [images] max_side / max_bytes in the configuration"
        )
    return _shrink(image_mod, data, shown, width, height, max_side, max_bytes)


def _shrink(
    image_mod: Any, data: bytes, shown: str, width: int, height: int, max_side: int, max_bytes: int
) -> LoadedImage:
    """Scale down (and re-encode) until the image fits both limits."""
    with image_mod.open(io.BytesIO(data)) as img:
        img.seek(0)  # the first frame of an animation
        frame = img.convert("RGBA") if img.mode in ("RGBA", "LA", "P") else img.convert("RGB")
    alpha = frame.mode == "RGBA" and frame.getextrema()[3][0] < 255
    side = min(max_side, max(width, height))
    for _ in range(8):
        scale = side / max(width, height)
        w, h = max(1, round(width * scale)), max(1, round(height * scale))
        resized = frame.resize((w, h), image_mod.Resampling.LANCZOS) if (w, h) != frame.size else frame
        out = io.BytesIO()
        if alpha:
            resized.save(out, format="PNG", optimize=True)
            mime = "image/png"
        else:
            resized.convert("RGB").save(out, format="JPEG", quality=85)
            mime = "image/jpeg"
        encoded = out.getvalue()
        if len(encoded) <= max_bytes:
            return LoadedImage(mime, encoded, w, h, (width, height, len(data)))
        side = int(side * 0.75)
    raise ToolError(f"{shown} cannot be made smaller than {max_bytes:,} bytes")


def _header_size(data: bytes) -> tuple[int, int]:
    """Width and height from the file header (used without Pillow); (0, 0) when unknown."""
    from kimicode.context.accounting import image_size

    found = image_size("data:x;base64," + base64.b64encode(data[:65_536]).decode("ascii"))
    return found if found is not None else (0, 0)


def image_part(
    path: str | Path, max_side: int = DEFAULT_MAX_SIDE, max_bytes: int = DEFAULT_MAX_BYTES
) -> dict[str, Any]:
    """The `image_url` content part for an image file (for `@image.png` in a prompt).

    Raises ToolError (a one-line message) when the file is missing, not an image, or too large.
    """
    p = Path(path)
    return load_image(p, str(path), max_side, max_bytes).part()


def user_content(text: str, images: Sequence[Mapping[str, Any]]) -> str | list[dict[str, Any]]:
    """A user message's content: the text alone, or a text part followed by image parts."""
    if not images:
        return text
    return [{"type": "text", "text": text}, *(dict(i) for i in images)]


def images_message(attached: Sequence[tuple[str, str, Sequence[Mapping[str, Any]]]]) -> dict[str, Any]:
    """The user message that carries the images tool calls of one step returned: (call id, tool, parts)."""
    names = ", ".join(f"{name} ({call_id})" for call_id, name, _ in attached)
    parts = [part for _, _, images in attached for part in images]
    return {"role": "user", "content": user_content(f"[Images returned by {names}]", parts)}


class VisionReader:
    """read_file that sends image files as images when the agent's model sees them, and refuses otherwise."""

    def __init__(
        self,
        inner: Tool,
        supports_images: Callable[[], bool],
        model: Callable[[], str],
        limits: Callable[[], tuple[int, int]] = lambda: (DEFAULT_MAX_SIDE, DEFAULT_MAX_BYTES),
    ) -> None:
        self.inner = inner
        self.supports_images = supports_images
        self.model = model
        self.limits = limits

    def tool(self) -> Tool:
        """The read_file tool (same name, description and schema as the wrapped one)."""
        description = self.inner.description
        return Tool(self.inner.name, description, self.inner.parameters, self._call, self.inner.kind)

    async def _call(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult | str:
        raw = args.get("path")
        if not isinstance(raw, str) or not is_image_path(raw):
            return await self.inner.fn(args, ctx)
        path = ctx.resolve(raw)
        if not path.is_file():
            return await self.inner.fn(args, ctx)  # its not-found message, with suggestions
        shown = shown_path(ctx, path)
        if not self.supports_images():
            size = path.stat().st_size
            raise ToolError(
                f"{shown} is an image ({path.suffix.lower().lstrip('.').upper()}, {size:,} bytes), and the current "
                f"model ({self.model()}) cannot see images. Describe what you need from it to the user, or use "
                "bash (e.g. `file`) for its type and dimensions"
            )
        max_side, max_bytes = self.limits()
        image = await asyncio.to_thread(load_image, path, shown, max_side, max_bytes)
        ctx.remember(path)
        return ImageResult(
            content=f"{shown} is an image ({image.describe()}); it is attached below, after the tool results.",
            summary=f"read {shown} (image {image.width}x{image.height})",
            display={"image": {"path": shown, "mime": image.mime, "width": image.width, "height": image.height}},
            images=(image.part(),),
        )
