"""Model profiles: how to talk to a model family (reasoning knobs, sampling, context window)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal

from kimicode.config.choices import SwitchPolicy

if TYPE_CHECKING:
    from kimicode.config.settings import ModelConfig

ProfileName = Literal["kimi-k3", "kimi-k2", "generic"]


@dataclass(frozen=True)
class ModelProfile:
    """Per-family request shaping. Chosen from the model name; every field can be overridden."""

    name: ProfileName
    context_window: int = 131_072
    max_completion_tokens: int = 32_768
    reasoning_field: str = "reasoning_content"
    """Field under which reasoning is sent back; replaced by whatever name the server uses."""
    supports_images: bool = False
    on_switch: SwitchPolicy = "keep"
    """What moving a conversation onto this model does to the assistant messages another model wrote
    (docs/models.md); `models.NAME.on_switch` and `[model] on_switch` override it."""
    prompt_addition: str | None = None
    """A file under `prompts/profiles/` added to the stable part of the system prompt for this family."""

    def request_params(self, effort: str | None) -> dict[str, Any]:
        """Top-level request fields for this family (reasoning knobs; never sampling for Kimi)."""
        if self.name == "kimi-k3":
            # K3 always reasons; effort is the top-level reasoning_effort; temperature is not sent.
            return {"reasoning_effort": effort or "high"}
        if self.name == "kimi-k2":
            params: dict[str, Any] = {"thinking": {"type": "enabled", "keep": "all"}}
            if effort:
                params["reasoning_effort"] = effort
            return params
        return {"reasoning_effort": effort} if effort else {}


def profile_for(model: str) -> ModelProfile:
    """Pick the profile from the model name (`kimi-k3*`, `kimi-k2*`, anything else is generic)."""
    m = model.lower().rsplit("/", 1)[-1]  # OpenRouter-style "moonshotai/kimi-k3"
    if m.startswith("kimi-k3"):
        # Moonshot: K3 was trained with preserved reasoning and its answers swing when handed reasoning it
        # did not write, so another model's reasoning is left out when a conversation moves onto it.
        return ModelProfile(
            "kimi-k3",
            context_window=1_048_576,
            supports_images=True,
            on_switch="strip",
            prompt_addition="profiles/kimi-k3.md",
        )
    if m.startswith("kimi-k2"):
        return ModelProfile("kimi-k2", context_window=262_144, on_switch="strip")
    if m.startswith("deepseek"):
        return ModelProfile("generic", context_window=131_072)
    return ModelProfile("generic")


def profile_with(profile: ModelProfile, mc: ModelConfig) -> ModelProfile:
    """The model profile with the configured context window, output limit and image support applied."""
    changes: dict[str, Any] = {}
    if mc.context_window:
        changes["context_window"] = mc.context_window
    if mc.max_completion_tokens:
        changes["max_completion_tokens"] = mc.max_completion_tokens
    if mc.supports_images is not None:
        changes["supports_images"] = mc.supports_images
    if mc.reasoning_field:
        changes["reasoning_field"] = mc.reasoning_field
    return replace(profile, **changes) if changes else profile
