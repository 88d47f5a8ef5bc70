"""What a 2026-07-28 client does with airlock's input-required rounds and approval tasks
(SPEC 22.3 items 1 and 2, 23), with the Python `mcp` SDK's own session: shared by client.py
(stdio) and http_client.py (Streamable HTTP), which connect and then call these. Each returns
what it observed; the Rust tests decide.
"""

import anyio
import mcp_types as types
import pydantic
from mcp.shared.exceptions import MCPError


def result_json(result):
    if isinstance(result, types.CallToolResult):
        return {
            "is_error": bool(result.is_error),
            "text": "".join(c.text for c in result.content if isinstance(c, types.TextContent)),
        }
    return {"other": repr(result)}


def input_required_json(result):
    """An `InputRequiredResult` as the test reads it: its input requests and state."""
    return {
        "requests": {
            key: request.model_dump(by_alias=True, mode="json", exclude_none=True)
            for key, request in (result.input_requests or {}).items()
        },
        "state": result.request_state,
    }


async def round_call(session, name, arguments, **kwargs):
    """`tools/call` that returns an input-required round instead of raising on it."""
    try:
        result = await session.call_tool(name, arguments, allow_input_required=True, **kwargs)
    except MCPError as e:
        return {"error_code": e.error.code, "error_message": e.error.message}
    if isinstance(result, types.InputRequiredResult):
        return input_required_json(result)
    return result_json(result)


async def input_rounds(session, text):
    """An allowed call; a parked `test__append` of `text` answered with the approval form and a
    sealed state, which is refused once changed and moves the call once answered yes; the test
    server's own roots round, answered with a root of the client's."""
    observed = {"allowed": await round_call(session, "test__slow", {"seconds": 0})}
    asked = await round_call(session, "test__append", {"text": text})
    observed["asked"] = asked
    state = asked.get("state")
    if state:
        yes = {"approval": {"action": "accept", "content": {"approve": True}}}
        tampered = state[:-1] + ("0" if state[-1] != "0" else "1")
        observed["tampered"] = await round_call(
            session, "test__append", {"text": text}, input_responses=yes, request_state=tampered
        )
        observed["answered"] = await round_call(
            session, "test__append", {"text": text}, input_responses=yes, request_state=state
        )
    roots = await round_call(session, "test__roots", {})
    observed["roots_asked"] = roots
    if roots.get("requests"):
        key = next(iter(roots["requests"]))
        answer = {key: {"roots": [{"uri": "file:///client/root", "name": "client"}]}}
        observed["roots"] = await round_call(
            session, "test__roots", {}, input_responses=answer, request_state=roots.get("state")
        )
    return observed


class AnyResult(types.Result):
    """A result whose every field is kept (the SDK has no model of 2026-07-28's tasks)."""

    model_config = pydantic.ConfigDict(extra="allow")


async def get_task(session, task_id):
    """One `tasks/get` of `task_id` on `session`, every field of its result kept."""
    got = await session.send_request(
        types.GetTaskRequest(params=types.GetTaskRequestParams(task_id=task_id)), AnyResult
    )
    return got.model_dump(by_alias=True, mode="json", exclude_none=True)


async def approval_task(session, text, approve_pending, poll=None):
    """A parked `test__append` of `text` answered as a task (the session declared the tasks
    extension); `approve_pending()` approves it from another process; `tasks/get` is polled
    (by `poll(task_id)`, else on `session`) until the task is no longer working."""
    observed = {}
    created = await session.send_request(
        types.CallToolRequest(params=types.CallToolRequestParams(name="test__append", arguments={"text": text})),
        AnyResult,
    )
    dumped = created.model_dump(by_alias=True, mode="json", exclude_none=True)
    observed["created"] = dumped
    task_id = (dumped.get("task") or dumped).get("taskId")
    if not task_id:
        return observed
    observed.update(await anyio.to_thread.run_sync(approve_pending))
    observed["final"] = await poll_task(task_id, poll or (lambda task_id: get_task(session, task_id)))
    return observed


async def poll_task(task_id, poll):
    """`poll(task_id)` (one `tasks/get`) every 200 ms until the task is no longer working (at
    most 30 s): its last result."""
    got = {}
    for _ in range(150):
        got = await poll(task_id)
        if got.get("status") not in ("working", "input_required"):
            break
        await anyio.sleep(0.2)
    return got
