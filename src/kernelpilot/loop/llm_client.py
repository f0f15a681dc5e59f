"""Chat models with tool use, through the official SDKs: Anthropic's Messages API, and any OpenAI-compatible
Chat Completions endpoint (OpenAI, vLLM, Ollama, OpenRouter: a base URL). One provider-neutral history;
each adapter converts it to its wire format and its reply back.

Configuration, first found wins: arguments (the CLI's flags), then the environment (``KPILOT_LLM_PROVIDER``,
``KPILOT_LLM_MODEL``, ``KPILOT_LLM_BASE_URL``, ``KPILOT_LLM_API_KEY``, then the provider's own
``ANTHROPIC_API_KEY`` / ``OPENAI_API_KEY`` / ``*_BASE_URL``), then ``[llm]`` in ``.kpilot/config.toml``.

The SDKs retry connection errors, 429 and 5xx with exponential backoff (honouring ``retry-after``); what is
left after the retries becomes one ``LLMError`` with a sentence a user can act on.
"""

from __future__ import annotations

import json
import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelpilot.errors import KernelpilotError
from kernelpilot.options import Options, param

__all__ = ["LLMConfig", "LLMChoice", "WithKey", "LLMError", "ToolCall", "ToolSpec", "Reply", "Turn", "ChatModel",
           "load_config", "connect"]

DEFAULT_MODELS = {"anthropic": "claude-sonnet-4-5", "openai": "gpt-5"}
# How long ``ChatModel.verify`` waits for its one request.
_VERIFY_TIMEOUT_S = 30.0


class LLMError(KernelpilotError):
    """The model could not be reached or refused the request (after the SDK's retries)."""


@dataclass
class LLMConfig:
    provider: str = "anthropic"               # anthropic | openai
    model: str | None = None
    api_key: str | None = None
    base_url: str | None = None
    max_tokens: int = 8192
    max_retries: int = 4
    timeout: float = 300.0
    price_in: float | None = None             # USD per million input tokens (for the cost per step)
    price_out: float | None = None


@dataclass(frozen=True, kw_only=True)
class LLMChoice(Options):
    """Which model to talk to (declared once for `optimize --strategy llm` and `docs ask`); each unset one comes
    from the environment or ``.kpilot/config.toml`` (``load_config``)."""

    provider: str | None = param("The model's API: Anthropic's Messages API, or any OpenAI-compatible endpoint "
                                 "(default: KPILOT_LLM_PROVIDER, .kpilot/config.toml, anthropic).",
                                 choices=tuple(DEFAULT_MODELS))
    model: str | None = param("The model name.")
    base_url: str | None = param("The endpoint (vLLM, Ollama, OpenRouter, a proxy).")


@dataclass(frozen=True, kw_only=True)
class WithKey(Options):
    """The API key, from the command line only: never stored, never a tool's argument (a server's model takes
    its key from the server's environment)."""

    api_key: str | None = param("The model's API key (default: KPILOT_LLM_API_KEY, ANTHROPIC_API_KEY or "
                                "OPENAI_API_KEY); never stored.", tool=False)


def load_config(*, provider: str | None = None, model: str | None = None, api_key: str | None = None,
                base_url: str | None = None, config_file: Path | None = None, **extra: Any) -> LLMConfig:
    """Arguments, then the environment, then ``[llm]`` of the config file."""
    file_cfg: dict[str, Any] = {}
    path = config_file or Path(".kpilot") / "config.toml"
    if path.is_file():
        try:
            file_cfg = tomllib.loads(path.read_text()).get("llm", {})
        except tomllib.TOMLDecodeError as e:
            raise KernelpilotError(f"{path}: not valid TOML ({e}).") from None
    env = os.environ
    prov = provider or env.get("KPILOT_LLM_PROVIDER") or file_cfg.get("provider") or "anthropic"
    if prov not in DEFAULT_MODELS:
        raise KernelpilotError(f"unknown LLM provider {prov!r}: anthropic, or openai (any OpenAI-compatible "
                               "endpoint, with --base-url).")
    own = "ANTHROPIC" if prov == "anthropic" else "OPENAI"
    cfg = LLMConfig(
        provider=prov,
        model=model or env.get("KPILOT_LLM_MODEL") or file_cfg.get("model") or DEFAULT_MODELS[prov],
        api_key=api_key or env.get("KPILOT_LLM_API_KEY") or env.get(f"{own}_API_KEY")
        or (env.get(file_cfg["api_key_env"]) if file_cfg.get("api_key_env") else None),
        base_url=base_url or env.get("KPILOT_LLM_BASE_URL") or env.get(f"{own}_BASE_URL") or file_cfg.get("base_url"),
    )
    for k in ("max_tokens", "max_retries", "timeout", "price_in", "price_out"):
        v = extra.get(k) if extra.get(k) is not None else file_cfg.get(k)
        if v is not None:
            setattr(cfg, k, v)
    return cfg


@dataclass(frozen=True)
class ToolSpec:
    """A tool as a model sees it: name, description and the JSON schema of its arguments, in either provider's
    wire form."""

    name: str
    description: str
    parameters: dict[str, Any]            # JSON schema (type object)

    def to_anthropic(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "input_schema": self.parameters}

    def to_openai(self) -> dict[str, Any]:
        return {"type": "function", "function": {"name": self.name, "description": self.description,
                                                 "parameters": self.parameters}}


@dataclass
class ToolCall:
    id: str
    name: str
    arguments: dict[str, Any]


@dataclass
class Reply:
    text: str
    tool_calls: list[ToolCall]
    tokens_in: int = 0
    tokens_out: int = 0
    stop: str | None = None


@dataclass
class Turn:
    """One entry of the provider-neutral history."""

    role: str                                         # "user", "assistant", "tool"
    text: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)          # assistant
    results: list[tuple[str, str, bool]] = field(default_factory=list)  # tool: (call id, content, is_error)


class ChatModel:
    """``reply(system, history, tools)``: the model's next turn. Build with ``connect(config)``."""

    def __init__(self, cfg: LLMConfig) -> None:
        self.cfg = cfg

    def reply(self, system: str, history: list[Turn], tools: list[Any]) -> Reply:
        raise NotImplementedError

    def _list_models(self) -> None:
        raise NotImplementedError

    def verify(self) -> None:
        """Fail at once, before a run spends minutes evaluating its start, when the key is rejected or the
        endpoint cannot be reached: one cheap request (the list of models), not retried. Anything else (an
        endpoint without that list, a rate limit, a slow answer) is left to the real requests."""
        sdk = self.sdk
        try:
            self._list_models()
        except sdk.APITimeoutError:
            return
        except (sdk.AuthenticationError, sdk.PermissionDeniedError, sdk.APIConnectionError) as e:
            raise self._error(e, sdk) from None
        except sdk.APIError:
            return

    def _where(self) -> str:
        return f"{self.cfg.provider} ({self.cfg.base_url or 'its default endpoint'}, model {self.cfg.model})"

    def _error(self, e: Exception, sdk) -> LLMError:
        where = self._where()
        status = getattr(e, "status_code", None)
        if isinstance(e, sdk.AuthenticationError):
            return LLMError(f"the API key was rejected by {where} (HTTP {status}).",
                            hint="Check the key (--api-key, KPILOT_LLM_API_KEY or the provider's own variable).")
        if isinstance(e, sdk.RateLimitError):
            return LLMError(f"rate limited by {where} (HTTP 429) after {self.cfg.max_retries} retries with backoff.",
                            hint="Wait and resume the run (kpilot optimize --resume ID).")
        if isinstance(e, sdk.APITimeoutError):
            return LLMError(f"no answer from {where} within {self.cfg.timeout:.0f} s.")
        if isinstance(e, sdk.APIConnectionError):
            return LLMError(f"cannot reach {where}: {e.__cause__ or e}.",
                            hint="Check the network and --base-url; a stopped run resumes with --resume ID.")
        if isinstance(e, sdk.APIStatusError):
            body = getattr(e, "message", "") or str(e)
            return LLMError(f"{where} refused the request (HTTP {status}): {body[:300]}")
        return LLMError(f"{where} failed: {type(e).__name__}: {e}")


class AnthropicModel(ChatModel):
    def __init__(self, cfg: LLMConfig) -> None:
        super().__init__(cfg)
        import anthropic

        self.sdk = anthropic
        self.client = anthropic.Anthropic(api_key=cfg.api_key, base_url=cfg.base_url, max_retries=cfg.max_retries,
                                          timeout=cfg.timeout)

    def _list_models(self) -> None:
        self.client.with_options(max_retries=0, timeout=_VERIFY_TIMEOUT_S).models.list(limit=1)

    def reply(self, system: str, history: list[Turn], tools: list[Any]) -> Reply:
        messages: list[dict[str, Any]] = []
        for t in history:
            if t.role == "user":
                messages.append({"role": "user", "content": t.text})
            elif t.role == "assistant":
                blocks: list[dict[str, Any]] = [{"type": "text", "text": t.text}] if t.text else []
                blocks += [{"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments} for c in t.tool_calls]
                messages.append({"role": "assistant", "content": blocks})
            else:
                messages.append({"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": cid, "content": content, "is_error": err}
                    for cid, content, err in t.results]})
        try:
            r = self.client.messages.create(model=self.cfg.model, max_tokens=self.cfg.max_tokens, system=system,
                                            messages=messages, tools=[t.to_anthropic() for t in tools])
        except self.sdk.APIError as e:
            raise self._error(e, self.sdk) from None
        text = "".join(b.text for b in r.content if b.type == "text")
        calls = [ToolCall(b.id, b.name, dict(b.input or {})) for b in r.content if b.type == "tool_use"]
        return Reply(text, calls, r.usage.input_tokens, r.usage.output_tokens, r.stop_reason)


class OpenAIModel(ChatModel):
    def __init__(self, cfg: LLMConfig) -> None:
        super().__init__(cfg)
        import openai

        self.sdk = openai
        self.client = openai.OpenAI(api_key=cfg.api_key, base_url=cfg.base_url, max_retries=cfg.max_retries,
                                    timeout=cfg.timeout)

    def _list_models(self) -> None:
        self.client.with_options(max_retries=0, timeout=_VERIFY_TIMEOUT_S).models.list()

    def reply(self, system: str, history: list[Turn], tools: list[Any]) -> Reply:
        messages: list[dict[str, Any]] = [{"role": "system", "content": system}]
        for t in history:
            if t.role == "user":
                messages.append({"role": "user", "content": t.text})
            elif t.role == "assistant":
                m: dict[str, Any] = {"role": "assistant", "content": t.text or None}
                if t.tool_calls:
                    m["tool_calls"] = [{"id": c.id, "type": "function",
                                        "function": {"name": c.name, "arguments": json.dumps(c.arguments)}}
                                       for c in t.tool_calls]
                messages.append(m)
            else:
                messages += [{"role": "tool", "tool_call_id": cid, "content": ("ERROR: " if err else "") + content}
                             for cid, content, err in t.results]
        try:
            r = self.client.chat.completions.create(model=self.cfg.model, messages=messages,
                                                    tools=[t.to_openai() for t in tools],
                                                    max_completion_tokens=self.cfg.max_tokens)
        except self.sdk.APIError as e:
            raise self._error(e, self.sdk) from None
        choice = r.choices[0]
        calls = []
        for c in choice.message.tool_calls or []:
            try:
                args = json.loads(c.function.arguments or "{}")
            except json.JSONDecodeError:
                args = {"_unparsed": c.function.arguments}
            calls.append(ToolCall(c.id, c.function.name, args if isinstance(args, dict) else {"_value": args}))
        usage = r.usage
        return Reply(choice.message.content or "", calls, getattr(usage, "prompt_tokens", 0) or 0,
                     getattr(usage, "completion_tokens", 0) or 0, choice.finish_reason)


def connect(cfg: LLMConfig) -> ChatModel:
    """The model client for ``cfg``; says in one line what is missing (SDK, key)."""
    pkg = "anthropic" if cfg.provider == "anthropic" else "openai"
    try:
        __import__(pkg)
    except ImportError:
        raise LLMError(f"the {pkg} package is not installed: pip install 'kernelpilot[llm]'.") from None
    if not cfg.api_key:
        if cfg.provider == "openai" and cfg.base_url:
            cfg.api_key = "none"          # local OpenAI-compatible servers (vLLM, Ollama) take any key
        else:
            var = "ANTHROPIC_API_KEY" if cfg.provider == "anthropic" else "OPENAI_API_KEY"
            raise LLMError(f"no API key for {cfg.provider}: set {var} (or KPILOT_LLM_API_KEY), or pass --api-key.")
    return AnthropicModel(cfg) if cfg.provider == "anthropic" else OpenAIModel(cfg)
