"""airlock's own MCP conformance server (SPEC §19.7), built on the Python `mcp` SDK.

SPEC §19.7 compares what the official conformance suite (npm `@modelcontextprotocol/conformance`)
scores against this server directly with what it scores against the same server behind
`airlock mcp serve --listen`: every scenario that passes directly must pass through airlock.
`.ci/mcp-conformance.sh` runs both comparisons, for the 2025-11-25 suite (0.1.16) and for the
2026-07-28 requirement set (0.2.0-alpha.12). This file is the server under test: it implements
the fixed tools, resources, prompts, completions and multi-round-trip (MRTR, SEP-2322)
behaviours that the suite's server scenarios describe in their "Server Implementation
Requirements", and the tasks extension (`io.modelcontextprotocol/tasks`, SEP-2663) that the
not-scored `tasks-*` scenarios exercise: task-supporting tools, `tasks/get`, `tasks/update` and
`tasks/cancel`, on 2026-07-28 requests that declare the extension.

It speaks both protocol eras, chosen per request by the SDK:
- 2025-11-25: `initialize` handshake, sessions, server-to-client requests (sampling,
  elicitation, roots) on the request's stream, `logging/setLevel`, `resources/subscribe`;
- 2026-07-28: stateless requests carrying `_meta` (protocol version, client capabilities),
  `server/discover`, `subscriptions/listen`, caching hints, and `input_required` results
  instead of server-to-client requests. `requestState` is sealed by the SDK's
  `RequestStateBoundary` (AES-GCM under a per-process key), so a tampered state is refused.
Every tool or prompt that needs the client's input is written once, as a step function that
either finishes or names the input it still needs; on 2026-07-28 that need is returned as an
`input_required` result, on 2025-11-25 it is asked for over the back-channel and the step
runs again with the answers. Run as a task, the same step parks the task in `input_required`
until `tasks/update` has answered every request.

Over Streamable HTTP the era is chosen per HTTP request (the `MCP-Protocol-Version` header);
over stdio the SDK decides once per connection, from the client's first request.

Run:
    .ci/.venv/bin/python tests/mcp/conformance_server.py --stdio        # airlock's upstream
    .ci/.venv/bin/python tests/mcp/conformance_server.py --http 3001    # http://127.0.0.1:3001/mcp
The HTTP server binds 127.0.0.1 only and validates Host/Origin (DNS-rebinding protection).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import collections
import io
import itertools
import json
import logging
import struct
import sys
import time
import uuid
import warnings
import wave
import zlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import anyio
import mcp_types as types
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from mcp.server.caching import CacheHint
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel.server import NotificationOptions, Server
from mcp.server.request_state import RequestStateBoundary, RequestStateSecurity
from mcp.server.stdio import stdio_server
from mcp.server.streamable_http import EventCallback, EventMessage, EventStore
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, PromptsListChanged, ToolsListChanged
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError
from mcp.shared.inbound import decode_header_value
from mcp.shared.message import ServerMessageMetadata

# Logging and `logging/setLevel` are deprecated at 2026-07-28, but 2025-11-25 scenarios use them.
warnings.filterwarnings("ignore", category=MCPDeprecationWarning)

NAME = "airlock-conformance-server"
Ctx = ServerRequestContext[Any, Any]
CAPS_KEY = "io.modelcontextprotocol/clientCapabilities"
MISSING_CAPABILITY = -32021  # MissingRequiredClientCapabilityError (SEP-2575)
HEADER_MISMATCH = -32020  # HeaderMismatch (SEP-2243)


def is_modern(ctx: Ctx) -> bool:
    return ctx.protocol_version in MODERN_PROTOCOL_VERSIONS


def raw_params(ctx: Ctx) -> dict[str, Any]:
    return dict(ctx.params or {})


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def text_result(value: str, *, error: bool = False) -> dict[str, Any]:
    result: dict[str, Any] = {"content": [text(value)]}
    if error:
        result["isError"] = True
    return result


# --- Media fixtures: a 1x1 red PNG and 10 ms of silent 8 kHz WAV, built here rather than pasted.


def _png_red_pixel() -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)  # 1x1, 8-bit RGB
    pixels = zlib.compress(b"\x00\xff\x00\x00")  # filter byte, then one red pixel
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels) + chunk(b"IEND", b"")


def _wav_silence() -> bytes:
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(8000)
        out.writeframes(b"\x00\x00" * 80)
    return buffer.getvalue()


PNG = base64.b64encode(_png_red_pixel()).decode()
WAV = base64.b64encode(_wav_silence()).decode()


# --- Client input, both eras (tools-call-sampling/-elicitation, elicitation-sep*, MRTR).


@dataclass
class Need:
    """What a step still needs from the client: input requests keyed by name, and the state to
    resume from (sealed by the SDK before it leaves the server on 2026-07-28)."""

    requests: dict[str, dict[str, Any]]
    state: str | None = None


Step = Callable[[Ctx, dict[str, Any], dict[str, Any], "str | None"], Awaitable["dict[str, Any] | Need"]]

# The client capability each input request relies on.
CAPABILITY_FOR = {"elicitation/create": "elicitation", "sampling/createMessage": "sampling", "roots/list": "roots"}
REQUEST_MODELS: dict[str, tuple[type[Any], type[Any]]] = {
    "elicitation/create": (types.ElicitRequest, types.ElicitResult),
    "sampling/createMessage": (types.CreateMessageRequest, types.CreateMessageResult),
    "roots/list": (types.ListRootsRequest, types.ListRootsResult),
}


def client_capabilities(ctx: Ctx) -> dict[str, Any]:
    """The capabilities the client declared: per request on 2026-07-28, at `initialize` before."""
    if is_modern(ctx):
        caps = (raw_params(ctx).get("_meta") or {}).get(CAPS_KEY)
        return caps if isinstance(caps, dict) else {}
    declared = ctx.session.client_capabilities
    return declared.model_dump(by_alias=True, exclude_none=True) if declared else {}


def require_capabilities(ctx: Ctx, methods: list[str]) -> None:
    """A server must not rely on a capability the client did not declare (-32021, SEP-2575)."""
    declared = client_capabilities(ctx)
    missing = {CAPABILITY_FOR[m]: {} for m in methods if CAPABILITY_FOR[m] not in declared}
    if missing:
        raise MCPError(
            code=MISSING_CAPABILITY,
            message=f"Client did not declare the {', '.join(sorted(missing))} capability",
            data={"requiredCapabilities": missing},
        )


async def ask_over_back_channel(ctx: Ctx, request: dict[str, Any]) -> dict[str, Any]:
    """2025-11-25: send one input request to the client on this request's stream."""
    request_model, result_model = REQUEST_MODELS[request["method"]]
    answer = await ctx.session.send_request(
        request_model.model_validate({"method": request["method"], "params": request.get("params") or {}}),
        result_model,
        metadata=ServerMessageMetadata(related_request_id=ctx.request_id),
    )
    return answer.model_dump(by_alias=True, mode="json", exclude_none=True)


async def run_step(ctx: Ctx, args: dict[str, Any], step: Step) -> dict[str, Any]:
    """Drive a step function in the request's era (see the module docstring)."""
    if is_modern(ctx):
        params = raw_params(ctx)
        responses = params.get("inputResponses")
        outcome = await step(ctx, args, responses if isinstance(responses, dict) else {}, params.get("requestState"))
        if not isinstance(outcome, Need):
            return outcome
        require_capabilities(ctx, [r["method"] for r in outcome.requests.values()])
        result: dict[str, Any] = {"resultType": "input_required", "inputRequests": outcome.requests}
        if outcome.state is not None:
            result["requestState"] = outcome.state
        return result
    responses: dict[str, Any] = {}
    state: str | None = None
    for _ in range(8):  # no step here needs more than a few rounds
        outcome = await step(ctx, args, responses, state)
        if not isinstance(outcome, Need):
            return outcome
        require_capabilities(ctx, [r["method"] for r in outcome.requests.values()])
        for key, request in outcome.requests.items():
            responses[key] = await ask_over_back_channel(ctx, request)
        state = outcome.state
    raise MCPError(code=types.INTERNAL_ERROR, message="too many input rounds")


def elicit(message: str, properties: dict[str, Any], required: list[str] | None = None) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    return {"method": "elicitation/create", "params": {"message": message, "requestedSchema": schema}}


def sample(prompt: str, max_tokens: int) -> dict[str, Any]:
    message = {"role": "user", "content": text(prompt)}
    return {"method": "sampling/createMessage", "params": {"messages": [message], "maxTokens": max_tokens}}


LIST_ROOTS: dict[str, Any] = {"method": "roots/list", "params": {}}


def accepted(response: Any, field: str | None = None) -> Any:
    """The content of an accepted elicitation answer (or one of its fields), else None."""
    if not isinstance(response, dict) or response.get("action") != "accept":
        return None
    content = response.get("content")
    if not isinstance(content, dict):
        return None
    return content if field is None else content.get(field)


def sampled_text(response: Any) -> str | None:
    content = response.get("content") if isinstance(response, dict) else None
    if isinstance(content, list):  # 2026-07-28 sampling may answer with several blocks
        content = next((c for c in content if isinstance(c, dict) and c.get("type") == "text"), None)
    return content.get("text") if isinstance(content, dict) and isinstance(content.get("text"), str) else None


def roots_of(response: Any) -> list[str] | None:
    roots = response.get("roots") if isinstance(response, dict) else None
    if not isinstance(roots, list):
        return None
    return [r.get("uri", "?") for r in roots if isinstance(r, dict)]


def elicitation_summary(response: dict[str, Any]) -> str:
    return f"action={response.get('action')}, content={json.dumps(response.get('content') or {}, sort_keys=True)}"


# --- Tools (tools-*, elicitation-sep*, json-schema-2020-12, server-sse-polling, server-stateless).

Handler = Callable[[Ctx, dict[str, Any]], Awaitable[dict[str, Any]]]
TOOLS: dict[str, tuple[dict[str, Any], Handler]] = {}
NO_ARGS: dict[str, Any] = {"type": "object", "properties": {}}


def tool(name: str, description: str, input_schema: dict[str, Any] | None = None):
    def register(handler: Handler) -> Handler:
        spec = {"name": name, "description": description, "inputSchema": input_schema or NO_ARGS}
        TOOLS[name] = (spec, handler)
        return handler

    return register


def string_args(*names: str) -> dict[str, Any]:
    return {"type": "object", "properties": {n: {"type": "string"} for n in names}, "required": list(names)}


# tools-call-simple-text
@tool("test_simple_text", "Returns a fixed text.")
async def _simple_text(ctx: Ctx, args: dict[str, Any]) -> dict[str, Any]:
    return text_result("This is a simple text response for testing.")


# tools-call-image
@tool("test_image_content", "Returns a 1x1 red PNG.")
async def _image(ctx: Ctx, args: dict[str, Any]) -> dict[str, Any]:
    return {"content": [{"type": "image", "data": PNG, "mimeType": "image/png"}]}


# tools-call-audio
@tool("test_audio_content", "Returns 10 ms of silent WAV audio.")
async def _audio(ctx: Ctx, args: dict[str, Any]) -> dict[str, Any]:
    return {"content": [{"type": "audio", "data": WAV, "mimeType": "audio/wav"}]}


# tools-call-embedded-resource
@tool("test_embedded_resource", "Returns an embedded text resource.")
async def _embedded(ctx: Ctx, args: dict[str, Any]) -> dict[str, Any]:
    resource = {"uri": "test://embedded-resource", "mimeType": "text/plain", "text": "This is an embedded resource content."}
    return {"content": [{"type": "resource", "resource": resource}]}


# tools-call-mixed-content
@tool("test_multiple_content_types", "Returns text, an image and an embedded resource.")
async def _mixed(ctx: Ctx, args: dict[str, Any]) -> dict[str, Any]:
    resource = {
        "uri": "test://mixed-content-resource",
        "mimeType": "application/json",
        "text": json.dumps({"test": "data", "value": 123}, separators=(",", ":")),
    }
    return {
        "content": [
            text("Multiple content types test:"),
            {"type": "image", "data": PNG, "mimeType": "image/png"},
            {"type": "resource", "resource": resource},
        ]
    }


# Log entries honour the level set by logging/setLevel (2025-11-25; one level for the whole process,
# which is enough for the suite). On 2026-07-28 the SDK sends them only when the request's `_meta`
# asks for a log level (server-stateless: no logs without it).
LOG_LEVELS = ["debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"]
log_threshold = "debug"


async def log(ctx: Ctx, level: str, message: str) -> None:
    if not is_modern(ctx) and LOG_LEVELS.index(level) < LOG_LEVELS.index(log_threshold):
        return
    await ctx.session.send_log_message(level=level, data=message, logger=NAME, related_request_id=ctx.request_id)


# tools-call-with-logging
@tool("test_tool_with_logging", "Sends three info log entries while it runs.")
async def _with_logging(ctx: Ctx, args: dict[str, Any]) -> dict[str, Any]:
    await log(ctx, "info", "Tool execution started")
    await anyio.sleep(0.05)
    await log(ctx, "info", "Tool processing data")
    await anyio.sleep(0.05)
    await log(ctx, "info", "Tool execution completed")
    return text_result("Logging tool finished after three log entries.")


# tools-call-with-progress
@tool("test_tool_with_progress", "Reports progress 0, 50 and 100 of 100 when asked for progress.")
async def _with_progress(ctx: Ctx, args: dict[str, Any]) -> dict[str, Any]:
    for progress in (0, 50, 100):
        if progress:
            await anyio.sleep(0.05)
        await ctx.session.report_progress(progress, 100)  # no-op without a progress token
    return text_result("Progress tool finished at 100/100.")


# tools-call-error
@tool("test_error_handling", "Always fails, as a tool error.")
async def _error(ctx: Ctx, args: dict[str, Any]) -> dict[str, Any]:
    return text_result("This tool intentionally returns an error for testing", error=True)


# server-sse-polling (2025-11-25): closes this request's SSE stream mid-call; the client
# reconnects with Last-Event-ID and gets the result replayed from the event store.
@tool("test_reconnection", "Closes its SSE stream mid-call, then answers after the client reconnects.")
async def _reconnection(ctx: Ctx, args: dict[str, Any]) -> dict[str, Any]:
    if ctx.close_sse_stream is not None:
        await ctx.close_sse_stream()
    await anyio.sleep(0.1)
    return text_result("Reconnection test completed: the result arrived after the stream was closed.")


# tools-call-sampling
@tool("test_sampling", "Asks the client's model (sampling) and answers with what it said.", string_args("prompt"))
async def _sampling(ctx: Ctx, args: dict[str, Any]) -> dict[str, Any]:
    async def step(ctx: Ctx, args: dict[str, Any], responses: dict[str, Any], state: str | None):
        answer = sampled_text(responses.get("llm"))
        if answer is None:
            return Need({"llm": sample(str(args.get("prompt", "")), 100)})
        return text_result(f"LLM response: {answer}")

    return await run_step(ctx, args, step)


# tools-call-elicitation
@tool("test_elicitation", "Asks the user (elicitation) and answers with the response.", string_args("message"))
async def _elicitation(ctx: Ctx, args: dict[str, Any]) -> dict[str, Any]:
    properties = {
        "username": {"type": "string", "description": "User's response"},
        "email": {"type": "string", "description": "User's email address"},
    }

    async def step(ctx: Ctx, args: dict[str, Any], responses: dict[str, Any], state: str | None):
        answer = responses.get("user")
        if not isinstance(answer, dict):
            return Need({"user": elicit(str(args.get("message", "")), properties, ["username", "email"])})
        return text_result(f"User response: {elicitation_summary(answer)}")

    return await run_step(ctx, args, step)


def elicitation_tool(name: str, description: str, message: str, properties: dict[str, Any]) -> None:
    """An elicitation whose only point is its schema; answers with the client's response."""

    async def step(ctx: Ctx, args: dict[str, Any], responses: dict[str, Any], state: str | None):
        answer = responses.get("form")
        if not isinstance(answer, dict):
            return Need({"form": elicit(message, properties)})
        return text_result(f"Elicitation completed: {elicitation_summary(answer)}")

    async def handler(ctx: Ctx, args: dict[str, Any]) -> dict[str, Any]:
        return await run_step(ctx, args, step)

    tool(name, description)(handler)


# elicitation-sep1034-defaults: a default for every primitive type.
elicitation_tool(
    "test_elicitation_sep1034_defaults",
    "Elicits a form whose fields all carry defaults (SEP-1034).",
    "Please confirm or change these defaults",
    {
        "name": {"type": "string", "default": "John Doe"},
        "age": {"type": "integer", "default": 30},
        "score": {"type": "number", "default": 95.5},
        "status": {"type": "string", "enum": ["active", "inactive", "pending"], "default": "active"},
        "verified": {"type": "boolean", "default": True},
    },
)

# elicitation-sep1330-enums: the five enum shapes.
elicitation_tool(
    "test_elicitation_sep1330_enums",
    "Elicits a form with every enum variant (SEP-1330).",
    "Please choose some options",
    {
        "untitledSingle": {"type": "string", "enum": ["option1", "option2", "option3"]},
        "titledSingle": {
            "type": "string",
            "oneOf": [
                {"const": "value1", "title": "First Option"},
                {"const": "value2", "title": "Second Option"},
                {"const": "value3", "title": "Third Option"},
            ],
        },
        "legacyEnum": {
            "type": "string",
            "enum": ["opt1", "opt2", "opt3"],
            "enumNames": ["Option One", "Option Two", "Option Three"],
        },
        "untitledMulti": {"type": "array", "items": {"type": "string", "enum": ["option1", "option2", "option3"]}},
        "titledMulti": {
            "type": "array",
            "items": {
                "anyOf": [
                    {"const": "value1", "title": "First Choice"},
                    {"const": "value2", "title": "Second Choice"},
                    {"const": "value3", "title": "Third Choice"},
                ]
            },
        },
    },
)

# json-schema-2020-12: the tool's inputSchema keeps the 2020-12 keywords as written.
JSON_SCHEMA_2020_12 = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "$defs": {
        "address": {
            "$anchor": "addressDef",
            "type": "object",
            "properties": {"street": {"type": "string"}, "city": {"type": "string"}},
        }
    },
    "properties": {
        "name": {"type": "string"},
        "address": {"$ref": "#/$defs/address"},
        "contactMethod": {"type": "string", "enum": ["phone", "email"]},
        "phone": {"type": "string"},
        "email": {"type": "string"},
    },
    "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
    "if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
    "then": {"required": ["phone"]},
    "else": {"required": ["email"]},
    "additionalProperties": False,
}


@tool("json_schema_2020_12_tool", "Tool with JSON Schema 2020-12 features", JSON_SCHEMA_2020_12)
async def _json_schema(ctx: Ctx, args: dict[str, Any]) -> dict[str, Any]:
    return text_result(f"Received: {json.dumps(args, sort_keys=True)}")


# http-custom-header-server-validation (pending at 2026-07-28): an argument mirrored in an
# `Mcp-Param-Region` header, which the SDK checks against the body (SEP-2243).
@tool(
    "test_header_param",
    "Echoes a region that the client also sends as the Mcp-Param-Region header.",
    {"type": "object", "properties": {"region": {"type": "string", "x-mcp-header": "Region"}}, "required": ["region"]},
)
async def _header_param(ctx: Ctx, args: dict[str, Any]) -> dict[str, Any]:
    return text_result(f"region={args.get('region')}")


# server-stateless diagnostics (2026-07-28).
@tool("test_missing_capability", "Needs the client's sampling capability; refuses with -32021 without it.")
async def _missing_capability(ctx: Ctx, args: dict[str, Any]) -> dict[str, Any]:
    require_capabilities(ctx, ["sampling/createMessage"])
    return text_result("The client declared sampling.")


@tool("test_streaming_elicitation", "Answers on a response stream that carries no server-to-client request.")
async def _streaming(ctx: Ctx, args: dict[str, Any]) -> dict[str, Any]:
    await ctx.session.report_progress(50, 100)  # no-op without a progress token
    return text_result("Streaming complete.")


@tool("test_logging_tool", "Logs one info entry (on 2026-07-28 only when the request asks for a log level).")
async def _logging_tool(ctx: Ctx, args: dict[str, Any]) -> dict[str, Any]:
    await log(ctx, "info", "Diagnostic log entry")
    return text_result("Logging evaluated.")


async def announce(ctx: Ctx, event: Any, legacy: Callable[[], Awaitable[None]]) -> None:
    """Tell subscribers a list changed: `subscriptions/listen` streams (2026-07-28), and the
    session's standalone stream (2025-11-25)."""
    await BUS.publish(event)
    if not is_modern(ctx):
        try:
            await legacy()
        except Exception:  # noqa: BLE001 - a session without a standalone stream just misses it
            pass


@tool("test_trigger_tool_change", "Announces that the tool list changed.")
async def _trigger_tools(ctx: Ctx, args: dict[str, Any]) -> dict[str, Any]:
    await announce(ctx, ToolsListChanged(), ctx.session.send_tool_list_changed)
    return text_result("Tool list change announced.")


@tool("test_trigger_prompt_change", "Announces that the prompt list changed.")
async def _trigger_prompts(ctx: Ctx, args: dict[str, Any]) -> dict[str, Any]:
    await announce(ctx, PromptsListChanged(), ctx.session.send_prompt_list_changed)
    return text_result("Prompt list change announced.")


# --- MRTR tools (input-required-result-*, SEP-2322); on 2025-11-25 they ask over the back-channel.

USER_NAME = elicit("What is your name?", {"name": {"type": "string"}}, ["name"])


def mrtr_tool(name: str, description: str):
    def register(step: Step) -> Step:
        async def handler(ctx: Ctx, args: dict[str, Any]) -> dict[str, Any]:
            return await run_step(ctx, args, step)

        tool(name, description)(handler)
        return step

    return register


# input-required-result-basic-elicitation, -missing-input-response (a wrong or missing answer is
# asked for again), -result-type, -ignore-extra-params, -validate-input.
@mrtr_tool("test_input_required_result_elicitation", "MRTR: asks for the user's name (elicitation).")
async def _mrtr_elicitation(ctx: Ctx, args: dict[str, Any], responses: dict[str, Any], state: str | None):
    name = accepted(responses.get("user_name"), "name")
    if not isinstance(name, str):
        return Need({"user_name": USER_NAME})
    return text_result(f"Hello, {name}!")


# input-required-result-basic-sampling
@mrtr_tool("test_input_required_result_sampling", "MRTR: asks the client's model a question (sampling).")
async def _mrtr_sampling(ctx: Ctx, args: dict[str, Any], responses: dict[str, Any], state: str | None):
    answer = sampled_text(responses.get("capital_question"))
    if answer is None:
        return Need({"capital_question": sample("What is the capital of France?", 100)})
    return text_result(f"The model answered: {answer}")


# input-required-result-basic-list-roots
@mrtr_tool("test_input_required_result_list_roots", "MRTR: asks for the client's roots.")
async def _mrtr_roots(ctx: Ctx, args: dict[str, Any], responses: dict[str, Any], state: str | None):
    roots = roots_of(responses.get("client_roots"))
    if roots is None:
        return Need({"client_roots": LIST_ROOTS})
    return text_result(f"Client roots: {', '.join(roots) or '(none)'}")


# input-required-result-request-state
@mrtr_tool("test_input_required_result_request_state", "MRTR: asks for a confirmation and keeps requestState.")
async def _mrtr_state(ctx: Ctx, args: dict[str, Any], responses: dict[str, Any], state: str | None):
    confirm = elicit("Please confirm", {"ok": {"type": "boolean"}}, ["ok"])
    if state != "awaiting-confirmation" or accepted(responses.get("confirm")) is None:
        return Need({"confirm": confirm}, "awaiting-confirmation")
    return text_result(f"state-ok: confirmed={json.dumps(accepted(responses['confirm'], 'ok'))}")


# input-required-result-multiple-input-requests
@mrtr_tool("test_input_required_result_multiple_inputs", "MRTR: asks for elicitation, sampling and roots at once.")
async def _mrtr_multiple(ctx: Ctx, args: dict[str, Any], responses: dict[str, Any], state: str | None):
    name = accepted(responses.get("user_name"), "name")
    greeting = sampled_text(responses.get("greeting"))
    roots = roots_of(responses.get("client_roots"))
    if state != "awaiting-three-answers" or name is None or greeting is None or roots is None:
        requests = {"user_name": USER_NAME, "greeting": sample("Generate a greeting", 50), "client_roots": LIST_ROOTS}
        return Need(requests, "awaiting-three-answers")
    return text_result(f"name={name}; greeting={greeting}; roots={', '.join(roots) or '(none)'}")


# input-required-result-multi-round: two rounds, the state changing between them.
@mrtr_tool("test_input_required_result_multi_round", "MRTR: asks two questions in two rounds.")
async def _mrtr_multi_round(ctx: Ctx, args: dict[str, Any], responses: dict[str, Any], state: str | None):
    step1 = elicit("Step 1: What is your name?", {"name": {"type": "string"}}, ["name"])
    step2 = elicit("Step 2: What is your favorite color?", {"color": {"type": "string"}}, ["color"])
    if state is None or not state.startswith("round-"):
        return Need({"step1": step1}, "round-1")
    if state == "round-1":
        name = accepted(responses.get("step1"), "name")
        if not isinstance(name, str):
            return Need({"step1": step1}, "round-1")
        return Need({"step2": step2}, "round-2:" + json.dumps(name))
    name = json.loads(state.removeprefix("round-2:"))
    color = accepted(responses.get("step2"), "color")
    if not isinstance(color, str):
        return Need({"step2": step2}, state)
    return text_result(f"{name} likes {color}.")


# input-required-result-tampered-state: the SDK's boundary refuses a modified requestState with -32602.
@mrtr_tool("test_input_required_result_tampered_state", "MRTR: keeps an integrity-protected requestState.")
async def _mrtr_tampered(ctx: Ctx, args: dict[str, Any], responses: dict[str, Any], state: str | None):
    confirm = elicit("Please confirm", {"ok": {"type": "boolean"}}, ["ok"])
    if state != "tamper-check" or accepted(responses.get("confirm")) is None:
        return Need({"confirm": confirm}, "tamper-check")
    return text_result("integrity-ok: the requestState verified")


# input-required-result-capability-check: only ask for what the client declared.
@mrtr_tool("test_input_required_result_capabilities", "MRTR: asks only for inputs the client declared it supports.")
async def _mrtr_capabilities(ctx: Ctx, args: dict[str, Any], responses: dict[str, Any], state: str | None):
    if responses:
        return text_result(f"capabilities-ok: received {', '.join(sorted(responses))}")
    declared = client_capabilities(ctx)
    requests: dict[str, dict[str, Any]] = {}
    if "elicitation" in declared:
        requests["elicit_input"] = elicit("Elicitation input", {"value": {"type": "string"}}, ["value"])
    if "sampling" in declared:
        requests["sample_input"] = sample("Sample request", 50)
    if not requests:
        return text_result("The client declared neither elicitation nor sampling.")
    return Need(requests, "capabilities")


# --- Tasks extension (tasks-*, SEP-2663; 2026-07-28 only).
#
# A request whose `_meta` client capabilities name `io.modelcontextprotocol/tasks` under `extensions`
# has negotiated the extension, per request (there is no session to remember it). Then a
# task-supporting tool answers with a flat CreateTaskResult (`resultType: "task"`) and runs in the
# background; `tasks/get` reports it (the result or error inlined once terminal, the pending
# `inputRequests` while `input_required`), `tasks/update` delivers input responses and
# `tasks/cancel` stops it. Without the extension a task-supporting tool runs synchronously (MRTR
# for its input), and a task-required one, like every `tasks/*` method, is refused with -32021.
# A task's body is the same step function as a synchronous tool's: each input it needs parks the
# task in `input_required` until every requested key is answered, then the step runs again. The
# store is in memory, per process; tasks expire `ttlMs` after creation.

TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
TASK_TTL_MS = 10 * 60 * 1000
TASK_POLL_INTERVAL_MS = 250
TERMINAL = frozenset({"completed", "failed", "cancelled"})


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def tasks_negotiated(ctx: Ctx) -> bool:
    extensions = client_capabilities(ctx).get("extensions") if is_modern(ctx) else None
    return isinstance(extensions, dict) and TASKS_EXTENSION in extensions


def require_tasks(ctx: Ctx) -> None:
    if not tasks_negotiated(ctx):
        raise MCPError(
            code=MISSING_CAPABILITY,
            message=f"Client did not declare the {TASKS_EXTENSION} extension",
            data={"requiredCapabilities": {"extensions": {TASKS_EXTENSION: {}}}},
        )


@dataclass
class Task:
    task_id: str
    created_at: str
    expires_at: float  # time.monotonic()
    status: str = "working"
    last_updated_at: str = ""
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    pending: dict[str, dict[str, Any]] = field(default_factory=dict)
    answers: dict[str, Any] = field(default_factory=dict)
    answered: anyio.Event | None = None
    runner: asyncio.Task[None] | None = None

    def set_status(self, status: str) -> None:
        self.status = status
        self.last_updated_at = now_iso()

    def info(self) -> dict[str, Any]:
        return {
            "taskId": self.task_id,
            "status": self.status,
            "createdAt": self.created_at,
            "lastUpdatedAt": self.last_updated_at or self.created_at,
            "ttlMs": TASK_TTL_MS,
            "pollIntervalMs": TASK_POLL_INTERVAL_MS,
        }

    def detailed(self) -> dict[str, Any]:
        """The DetailedTask of `tasks/get`: the result, error or pending input inlined."""
        detailed = self.info()
        if self.status == "completed" and self.result is not None:
            detailed["result"] = self.result
        elif self.status == "failed" and self.error is not None:
            detailed["error"] = self.error
        elif self.status == "input_required":
            detailed["inputRequests"] = dict(self.pending)
        return detailed

    async def ask(self, requests: dict[str, dict[str, Any]]) -> dict[str, Any]:
        """Park in `input_required` until every request is answered (possibly over several updates)."""
        self.pending, self.answers, self.answered = dict(requests), {}, anyio.Event()
        self.set_status("input_required")
        await self.answered.wait()
        return self.answers

    def update(self, responses: dict[str, Any]) -> None:
        """Take the answers to pending requests; other keys are ignored."""
        for key, response in responses.items():
            if key in self.pending:
                del self.pending[key]
                self.answers[key] = response
        if self.status == "input_required" and not self.pending and self.answered is not None:
            self.set_status("working")
            self.answered.set()

    def finish(self, status: str, *, result: dict[str, Any] | None = None, error: dict[str, Any] | None = None) -> None:
        if self.status in TERMINAL:
            return
        self.result, self.error, self.pending = result, error, {}
        self.set_status(status)


TASK_STORE: dict[str, Task] = {}


def expire_tasks() -> None:
    now = time.monotonic()
    for task_id, task in list(TASK_STORE.items()):
        if now >= task.expires_at:
            del TASK_STORE[task_id]
            if task.runner is not None:
                task.runner.cancel()


async def run_task(task: Task, ctx: Ctx, args: dict[str, Any], step: Step) -> None:
    """The task's body: drive `step` to a result, asking over `tasks/update` for its input. A tool
    error stays a result (`completed`, `isError`); a protocol error makes the task `failed`."""
    try:
        responses: dict[str, Any] = {}
        state: str | None = None
        while True:
            outcome = await step(ctx, args, responses, state)
            if not isinstance(outcome, Need):
                break
            require_capabilities(ctx, [r["method"] for r in outcome.requests.values()])
            responses.update(await task.ask(outcome.requests))
            state = outcome.state
        task.finish("completed", result={**outcome, "resultType": outcome.get("resultType", "complete")})
    except asyncio.CancelledError:
        task.finish("cancelled")
    except MCPError as error:
        task.finish("failed", error=error.error.model_dump(mode="json", exclude_none=True))
    except Exception as error:  # noqa: BLE001 - any crash is the task's protocol-level failure
        task.finish("failed", error={"code": types.INTERNAL_ERROR, "message": f"Task failed: {error}"})


async def start_task(ctx: Ctx, args: dict[str, Any], step: Step) -> dict[str, Any]:
    """Create the task (stored before the CreateTaskResult leaves, so an immediate `tasks/get`
    finds it) and run `step` in the background, outliving this request."""
    expire_tasks()
    created = now_iso()
    task = Task(uuid.uuid4().hex, created, time.monotonic() + TASK_TTL_MS / 1000, last_updated_at=created)
    TASK_STORE[task.task_id] = task
    task.runner = asyncio.get_running_loop().create_task(run_task(task, ctx, args, step))
    return {"resultType": "task", **task.info()}


def task_tool(name: str, description: str, input_schema: dict[str, Any] | None = None, *, required: bool = False):
    """A tool that runs as a task when the request negotiated the extension; otherwise
    synchronously, or (`required`) not at all (-32021)."""

    def register(step: Step) -> Step:
        async def handler(ctx: Ctx, args: dict[str, Any]) -> dict[str, Any]:
            if tasks_negotiated(ctx):
                return await start_task(ctx, args, step)
            if required:
                require_tasks(ctx)
            return await run_step(ctx, args, step)

        tool(name, description, input_schema)(handler)
        return step

    return register


@tool("greet", "Says hello; never runs as a task.", string_args("name"))
async def _greet(ctx: Ctx, args: dict[str, Any]) -> dict[str, Any]:
    return text_result(f"Hello, {args.get('name')}!")


SLOW_COMPUTE_ARGS = {
    "type": "object",
    "properties": {"seconds": {"type": "number", "minimum": 0, "maximum": 600}, "label": {"type": "string"}},
    "required": ["seconds"],
}


@task_tool("slow_compute", "Task-supporting: sleeps `seconds` seconds, then answers.", SLOW_COMPUTE_ARGS)
async def _slow_compute(ctx: Ctx, args: dict[str, Any], responses: dict[str, Any], state: str | None):
    seconds = args.get("seconds", 1)
    if not isinstance(seconds, (int, float)) or isinstance(seconds, bool) or not 0 <= seconds <= 600:
        raise MCPError(code=types.INVALID_PARAMS, message="seconds must be a number from 0 to 600")
    await anyio.sleep(seconds)
    label = args.get("label")
    return text_result(f"slow_compute{f' {label}' if label else ''}: done after {seconds} s")


@task_tool("failing_job", "Task-required: after about a second, fails as a tool error.", required=True)
async def _failing_job(ctx: Ctx, args: dict[str, Any], responses: dict[str, Any], state: str | None):
    await anyio.sleep(0.5)
    return text_result("failing_job: the job failed (a tool execution error, on purpose)", error=True)


@task_tool("protocol_error_job", "Task-supporting: fails with a protocol-level (JSON-RPC) error.")
async def _protocol_error_job(ctx: Ctx, args: dict[str, Any], responses: dict[str, Any], state: str | None):
    await anyio.sleep(0.1)
    raise MCPError(code=types.INTERNAL_ERROR, message="protocol_error_job: internal failure (on purpose)")


@task_tool("confirm_delete", "Task-supporting: asks for a confirmation (elicitation), then answers.", string_args("filename"))
async def _confirm_delete(ctx: Ctx, args: dict[str, Any], responses: dict[str, Any], state: str | None):
    filename = str(args.get("filename", ""))
    answer = responses.get("confirm")
    if not isinstance(answer, dict):
        return Need({"confirm": elicit(f"Delete {filename}?", {"confirm": {"type": "boolean"}}, ["confirm"])})
    if accepted(answer, "confirm") is True:
        return text_result(f"Deleted {filename}.")
    return text_result(f"Kept {filename} ({elicitation_summary(answer)}).")


@task_tool("multi_input", "Task-supporting: asks two questions at once (two elicitations), then answers.")
async def _multi_input(ctx: Ctx, args: dict[str, Any], responses: dict[str, Any], state: str | None):
    requests = {
        "name": elicit("What is your name?", {"name": {"type": "string"}}, ["name"]),
        "confirm": elicit("Proceed?", {"confirm": {"type": "boolean"}}, ["confirm"]),
    }
    missing = {key: request for key, request in requests.items() if not isinstance(responses.get(key), dict)}
    if missing:
        return Need(missing)
    return text_result(f"name={accepted(responses['name'], 'name')}; confirm={accepted(responses['confirm'], 'confirm')}")


# tasks-mrtr-composition: MRTR first (round 1 asks for the user's name, no task yet), then the
# final round escalates to a task whose result carries the name.
@tool("test_tool_with_task", "Task-required: asks for the user's name (MRTR), then greets in a task.")
async def _tool_with_task(ctx: Ctx, args: dict[str, Any]) -> dict[str, Any]:
    require_tasks(ctx)
    responses = raw_params(ctx).get("inputResponses")
    name = accepted((responses if isinstance(responses, dict) else {}).get("user_name"), "name")
    if not isinstance(name, str):
        return await run_step(ctx, args, _mrtr_elicitation)  # input_required for user_name

    async def greet_later(ctx: Ctx, args: dict[str, Any], responses: dict[str, Any], state: str | None):
        await anyio.sleep(0.2)
        return text_result(f"Hello, {name}!")

    return await start_task(ctx, args, greet_later)


def task_for(ctx: Ctx) -> tuple[Task, dict[str, Any]]:
    """The task a `tasks/*` request names, checked in the order the suite isolates them: the
    `Mcp-Name` routing header (SEP-2243, SEP-2663), the negotiated extension, the taskId."""
    if not is_modern(ctx):  # 2025-11-25's core tasks are not served
        raise MCPError(code=types.METHOD_NOT_FOUND, message="Method not found", data=ctx.method)
    params = raw_params(ctx)
    task_id = params.get("taskId")
    headers = getattr(ctx.request, "headers", None)
    if headers is not None and decode_header_value(headers.get("mcp-name")) != task_id:
        raise MCPError(code=HEADER_MISMATCH, message="Mcp-Name header does not match params.taskId")
    require_tasks(ctx)
    expire_tasks()
    task = TASK_STORE.get(task_id) if isinstance(task_id, str) else None
    if task is None:
        raise MCPError(code=types.INVALID_PARAMS, message="Unknown taskId", data={"taskId": task_id})
    return task, params


async def tasks_get(ctx: Ctx, params: types.RequestParams) -> dict[str, Any]:
    task, _ = task_for(ctx)
    return task.detailed()


async def tasks_update(ctx: Ctx, params: types.RequestParams) -> dict[str, Any]:
    task, raw = task_for(ctx)
    responses = raw.get("inputResponses")
    if not isinstance(responses, dict):
        raise MCPError(code=types.INVALID_PARAMS, message="inputResponses must be an object")
    task.update(responses)
    return {}


async def tasks_cancel(ctx: Ctx, params: types.RequestParams) -> dict[str, Any]:
    task, _ = task_for(ctx)
    if task.status not in TERMINAL:  # cancelling a finished task is an idempotent no-op
        task.finish("cancelled")
        if task.runner is not None:
            task.runner.cancel()
    return {}


async def list_tools(ctx: Ctx, params: types.PaginatedRequestParams) -> dict[str, Any]:
    return {"tools": [spec for spec, _ in TOOLS.values()]}


async def call_tool(ctx: Ctx, params: types.CallToolRequestParams) -> dict[str, Any]:
    entry = TOOLS.get(params.name)
    if entry is None:
        raise MCPError(code=types.INVALID_PARAMS, message=f"Unknown tool: {params.name}")
    return await entry[1](ctx, dict(params.arguments or {}))


# --- Resources (resources-*, sep-2164-resource-not-found, caching).

RESOURCES: dict[str, dict[str, Any]] = {
    "test://static-text": {
        "meta": {"name": "static-text", "description": "A fixed text resource", "mimeType": "text/plain"},
        "contents": {"mimeType": "text/plain", "text": "This is the content of the static text resource."},
    },
    "test://static-binary": {
        "meta": {"name": "static-binary", "description": "A fixed binary resource (PNG)", "mimeType": "image/png"},
        "contents": {"mimeType": "image/png", "blob": PNG},
    },
    "test://watched-resource": {
        "meta": {"name": "watched-resource", "description": "A resource to subscribe to", "mimeType": "text/plain"},
        "contents": {"mimeType": "text/plain", "text": "Watched resource content."},
    },
}
TEMPLATE_PREFIX, TEMPLATE_SUFFIX = "test://template/", "/data"
SUBSCRIBED: set[str] = set()


async def list_resources(ctx: Ctx, params: types.PaginatedRequestParams) -> dict[str, Any]:
    return {"resources": [{"uri": uri, **r["meta"]} for uri, r in RESOURCES.items()]}


async def list_resource_templates(ctx: Ctx, params: types.PaginatedRequestParams) -> dict[str, Any]:
    template = {
        "uriTemplate": TEMPLATE_PREFIX + "{id}" + TEMPLATE_SUFFIX,
        "name": "template-data",
        "description": "Data for an id, substituted into the URI",
        "mimeType": "application/json",
    }
    return {"resourceTemplates": [template]}


async def read_resource(ctx: Ctx, params: types.ReadResourceRequestParams) -> dict[str, Any]:
    uri = str(params.uri)
    if uri in RESOURCES:
        return {"contents": [{"uri": uri, **RESOURCES[uri]["contents"]}]}
    if uri.startswith(TEMPLATE_PREFIX) and uri.endswith(TEMPLATE_SUFFIX):
        ident = uri[len(TEMPLATE_PREFIX) : -len(TEMPLATE_SUFFIX)]
        if ident and "/" not in ident:
            data = {"id": ident, "templateTest": True, "data": f"Data for ID: {ident}"}
            body = json.dumps(data, separators=(",", ":"))
            return {"contents": [{"uri": uri, "mimeType": "application/json", "text": body}]}
    # sep-2164-resource-not-found: -32602 with the uri in data, never empty contents.
    raise MCPError(code=types.INVALID_PARAMS, message="Resource not found", data={"uri": uri})


# resources-subscribe / resources-unsubscribe (2025-11-25; 2026-07-28 uses subscriptions/listen).
async def subscribe(ctx: Ctx, params: types.SubscribeRequestParams) -> dict[str, Any]:
    SUBSCRIBED.add(str(params.uri))
    return {}


async def unsubscribe(ctx: Ctx, params: types.UnsubscribeRequestParams) -> dict[str, Any]:
    SUBSCRIBED.discard(str(params.uri))
    return {}


# --- Prompts (prompts-*, input-required-result-non-tool-request).


@dataclass
class PromptDef:
    description: str
    arguments: list[dict[str, Any]]
    render: Callable[[Ctx, dict[str, Any]], Awaitable[dict[str, Any]]]


def user(content: dict[str, Any]) -> dict[str, Any]:
    return {"role": "user", "content": content}


async def _simple_prompt(ctx: Ctx, args: dict[str, Any]) -> dict[str, Any]:
    return {"messages": [user(text("This is a simple prompt for testing."))]}


async def _prompt_with_arguments(ctx: Ctx, args: dict[str, Any]) -> dict[str, Any]:
    return {"messages": [user(text(f"Prompt with arguments: arg1='{args.get('arg1')}', arg2='{args.get('arg2')}'"))]}


async def _prompt_with_resource(ctx: Ctx, args: dict[str, Any]) -> dict[str, Any]:
    resource = {"uri": args.get("resourceUri", ""), "mimeType": "text/plain", "text": "Embedded resource content for testing."}
    return {
        "messages": [
            user({"type": "resource", "resource": resource}),
            user(text("Please process the embedded resource above.")),
        ]
    }


async def _prompt_with_image(ctx: Ctx, args: dict[str, Any]) -> dict[str, Any]:
    image = {"type": "image", "data": PNG, "mimeType": "image/png"}
    return {"messages": [user(image), user(text("Please analyze the image above."))]}


async def _mrtr_prompt_step(ctx: Ctx, args: dict[str, Any], responses: dict[str, Any], state: str | None):
    context = accepted(responses.get("user_context"), "context")
    if not isinstance(context, str):
        question = elicit("What context should the prompt use?", {"context": {"type": "string"}}, ["context"])
        return Need({"user_context": question})
    return {"messages": [user(text(f"Prompt with context: {context}"))]}


async def _mrtr_prompt(ctx: Ctx, args: dict[str, Any]) -> dict[str, Any]:
    return await run_step(ctx, args, _mrtr_prompt_step)


def argument(name: str, description: str) -> dict[str, Any]:
    return {"name": name, "description": description, "required": True}


PROMPTS: dict[str, PromptDef] = {
    "test_simple_prompt": PromptDef("A prompt without arguments", [], _simple_prompt),
    "test_prompt_with_arguments": PromptDef(
        "A prompt with two arguments",
        [argument("arg1", "First test argument"), argument("arg2", "Second test argument")],
        _prompt_with_arguments,
    ),
    "test_prompt_with_embedded_resource": PromptDef(
        "A prompt embedding a resource", [argument("resourceUri", "URI of the resource to embed")], _prompt_with_resource
    ),
    "test_prompt_with_image": PromptDef("A prompt with an image", [], _prompt_with_image),
    "test_input_required_result_prompt": PromptDef("MRTR: a prompt that asks for context (elicitation)", [], _mrtr_prompt),
}


async def list_prompts(ctx: Ctx, params: types.PaginatedRequestParams) -> dict[str, Any]:
    prompts = []
    for name, prompt in PROMPTS.items():
        entry: dict[str, Any] = {"name": name, "description": prompt.description}
        if prompt.arguments:
            entry["arguments"] = prompt.arguments
        prompts.append(entry)
    return {"prompts": prompts}


async def get_prompt(ctx: Ctx, params: types.GetPromptRequestParams) -> dict[str, Any]:
    prompt = PROMPTS.get(params.name)
    if prompt is None:
        raise MCPError(code=types.INVALID_PARAMS, message=f"Unknown prompt: {params.name}")
    args = dict(params.arguments or {})
    missing = [a["name"] for a in prompt.arguments if a.get("required") and a["name"] not in args]
    if missing:
        raise MCPError(code=types.INVALID_PARAMS, message=f"Missing prompt arguments: {', '.join(missing)}")
    return await prompt.render(ctx, args)


# --- Completion (completion-complete) and logging (logging-set-level).

COMPLETIONS = {
    ("ref/prompt", "test_prompt_with_arguments", "arg1"): ["paris", "park", "party", "past", "pattern"],
    ("ref/prompt", "test_prompt_with_arguments", "arg2"): ["world", "wonder", "work"],
    ("ref/resource", TEMPLATE_PREFIX + "{id}" + TEMPLATE_SUFFIX, "id"): ["1", "2", "3", "123"],
}


async def complete(ctx: Ctx, params: types.CompleteRequestParams) -> dict[str, Any]:
    ref = params.ref.model_dump(by_alias=True)
    key = (ref.get("type"), ref.get("name") or ref.get("uri"), params.argument.name)
    values = [v for v in COMPLETIONS.get(key, []) if v.startswith(params.argument.value)]
    return {"completion": {"values": values, "total": len(values), "hasMore": False}}


async def set_level(ctx: Ctx, params: types.SetLevelRequestParams) -> dict[str, Any]:
    global log_threshold
    log_threshold = params.level
    return {}


# --- The server.


class ConformanceServer(Server[Any]):
    def create_initialization_options(self, notification_options=None, *args: Any, **kwargs: Any):
        # 2025-11-25: the trigger tools and list changes reach sessions' standalone streams.
        everything = NotificationOptions(prompts_changed=True, resources_changed=True, tools_changed=True)
        return super().create_initialization_options(notification_options or everything, *args, **kwargs)


BUS = InMemorySubscriptionBus()
# caching (SEP-2549): freshness hints on every cacheable result; a resource read is per caller.
CACHE_HINTS = {
    "tools/list": CacheHint(ttl_ms=60_000, scope="public"),
    "prompts/list": CacheHint(ttl_ms=60_000, scope="public"),
    "resources/list": CacheHint(ttl_ms=60_000, scope="public"),
    "resources/templates/list": CacheHint(ttl_ms=60_000, scope="public"),
    "resources/read": CacheHint(ttl_ms=10_000, scope="private"),
}


def wire(handler: Callable[[Ctx, Any], Awaitable[dict[str, Any]]]) -> Callable[[Ctx, Any], Awaitable[dict[str, Any]]]:
    """Handlers answer with wire dicts; a 2026-07-28 result must say it is complete."""

    async def handle(ctx: Ctx, params: Any) -> dict[str, Any]:
        result = await handler(ctx, params)
        if is_modern(ctx) and "resultType" not in result:
            result = {**result, "resultType": "complete"}
        return result

    return handle


def build_server() -> ConformanceServer:
    server = ConformanceServer(
        NAME,
        version="1.0.0",
        cache_hints=CACHE_HINTS,
        get_tool_input_schema=lambda name: TOOLS[name][0]["inputSchema"] if name in TOOLS else None,
        on_list_tools=wire(list_tools),
        on_call_tool=wire(call_tool),
        on_list_resources=wire(list_resources),
        on_list_resource_templates=wire(list_resource_templates),
        on_read_resource=wire(read_resource),
        on_subscribe_resource=wire(subscribe),
        on_unsubscribe_resource=wire(unsubscribe),
        on_list_prompts=wire(list_prompts),
        on_get_prompt=wire(get_prompt),
        on_completion=wire(complete),
        on_subscriptions_listen=ListenHandler(BUS),
    )
    server.add_request_handler("logging/setLevel", types.SetLevelRequestParams, wire(set_level))
    # The tasks extension (SEP-2663): advertised under capabilities.extensions, served per request.
    server.extensions[TASKS_EXTENSION] = {}
    server.add_request_handler("tasks/get", types.RequestParams, wire(tasks_get))
    server.add_request_handler("tasks/update", types.RequestParams, wire(tasks_update))
    server.add_request_handler("tasks/cancel", types.RequestParams, wire(tasks_cancel))
    # Seals outgoing requestState and verifies echoed state before any handler sees it.
    server.middleware.append(RequestStateBoundary(RequestStateSecurity.ephemeral(), default_audience=NAME))
    return server


class MemoryEventStore(EventStore):
    """Keeps recent SSE events so a client reconnecting with Last-Event-ID gets what it missed
    (server-sse-polling)."""

    def __init__(self, limit: int = 10_000) -> None:
        self._events: collections.OrderedDict[str, tuple[str, Any]] = collections.OrderedDict()
        self._ids = itertools.count(1)
        self._limit = limit

    async def store_event(self, stream_id: str, message: Any) -> str:
        event_id = str(next(self._ids))
        self._events[event_id] = (stream_id, message)
        while len(self._events) > self._limit:
            self._events.popitem(last=False)
        return event_id

    async def replay_events_after(self, last_event_id: str, send_callback: EventCallback) -> str | None:
        if last_event_id not in self._events:
            return None
        stream_id = self._events[last_event_id][0]
        after = False
        for event_id, (stream, message) in list(self._events.items()):
            if after and stream == stream_id and message is not None:
                await send_callback(EventMessage(message, event_id))
            after = after or event_id == last_event_id
        return stream_id


async def serve_stdio(server: ConformanceServer) -> None:
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


def serve_http(server: ConformanceServer, port: int) -> None:
    import uvicorn

    # Bound to 127.0.0.1, the SDK turns on Host/Origin validation for localhost names
    # (dns-rebinding-protection); the event store and retry interval serve server-sse-polling.
    app = server.streamable_http_app(
        streamable_http_path="/mcp", host="127.0.0.1", event_store=MemoryEventStore(), retry_interval=500
    )
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--stdio", action="store_true", help="serve one client over stdin/stdout")
    mode.add_argument("--http", type=int, metavar="PORT", help="serve Streamable HTTP at http://127.0.0.1:PORT/mcp")
    options = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    server = build_server()
    if options.stdio:
        anyio.run(serve_stdio, server)
    else:
        serve_http(server, options.http)


if __name__ == "__main__":
    main()
