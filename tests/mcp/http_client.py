"""The MCP client of the Streamable HTTP listener's tests (SPEC §19.6, tests/tests/mcp_listen.rs):
the Python `mcp` SDK over Streamable HTTP to `airlock mcp serve --listen`. Each scenario prints
one JSON object of what it observed on stdout; the Rust test asserts on it. Nothing here
decides pass or fail. (A file of its own beside client.py, which drives stdio, so the two
transports' scenarios do not tangle.)

usage: http_client.py SCENARIO --url URL [--token TOKEN] [--airlock BIN --data DIR [--store URL]]

Scenarios:
- `call`: initialize, list tools, call `test__slow` with 0 seconds.
- `list_changed`: `test__set_description` changes a definition upstream; the client must hear
  `notifications/tools/list_changed` (within 20 s) and see the tool still listed.
- `scopes`: list tools, then call `test__slow` with 0 seconds and `test__note`, whatever the
  listing showed (the test decides which the token's scopes should reach).
- `concurrent`: in one session, `test__append` parks for approval (its SSE stream stays open
  with progress); while it is parked, `tools/list` is asked and answered on a second stream;
  only then is the approval approved from another process, and the parked call answered.
- `waiting`: a read beside a parked call, the parked call's cancel, its retry after approval,
  and a call without a progressToken (SPEC 22.2, 22.3).
- `leave`, then `rejoin`: a call without a progressToken on one session, which then ends; the
  identical call on a new session, its approval approved, and the call sent again (SPEC 22.3).
- `auto`: the SDK's `negotiate_auto` (a `server/discover` probe at 2026-07-28 first), then
  `test__slow` with 0 seconds; reports the version it settled on.
- `modern`: a 2026-07-28 client without a session (SPEC 22.1, 23), as two HTTP clients one after
  the other with the same `clientInfo` (a host that restarted, or two gateway processes behind
  one URL: `--url` may name two, comma-separated, the second client using the second): the
  first negotiates (`server/discover`), lists tools (reporting the listing's `ttlMs` and
  `cacheScope`) and calls `test__slow`; the second calls
  `test__append` without a progressToken (answered at once, naming its approval), which is
  approved from another process, and calls it again (the approved result).
- `task_poll --arg TASK_ID`: polls that task with the SDK's session until it is no longer
  working; reports its last `tasks/get` result as `final`.
- `rounds`, `task`: modern_rounds.py's input-required rounds (an allowed call, the approval
  form with a changed and then the real state, the test server's roots round) and approval task
  (approved from another process, polled to its end), at 2026-07-28 over Streamable HTTP.
- `logs`: two sessions at once (SPEC 19.7). `strict` asks for `error` and up, then `chatty` for
  `debug` and up and turns on server-everything's simulated logging, which sends a message of a
  random level every 5 s outside any call; waits (up to 60 s) until `chatty` heard, after the
  call's answer, a message below `error` and one at or above it, and reports the levels each
  heard outside the call (and what `chatty` heard during it).
"""

import argparse
import json
import re
import subprocess

import anyio
import mcp_types as types
from mcp.client._probe import negotiate_auto
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError

import modern_rounds
from modern_rounds import result_json

APPROVAL = re.compile(r"approval ([0-9a-f-]{36})")


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("scenario")
    p.add_argument("--url", required=True)
    p.add_argument("--token")
    p.add_argument("--airlock")
    p.add_argument("--data")
    p.add_argument("--policy-dir")
    p.add_argument("--store")
    p.add_argument("--arg", help="task_poll: the task id")
    return p.parse_args()


def approval_watcher():
    """A progress callback that keeps the first approval id a progress message names, and the
    list it keeps it in."""
    seen = []

    async def on_progress(value, total, message):
        match = APPROVAL.search(message or "")
        if match and not seen:
            seen.append(match.group(1))

    return seen, on_progress


async def call(session, name, arguments, on_progress=None):
    try:
        return result_json(await session.call_tool(name, arguments, progress_callback=on_progress))
    except MCPError as e:
        return {"error_code": e.error.code, "error_message": e.error.message}


def approve(args, approval):
    argv = [args.airlock, "--data-dir", args.data, "--tenant", "acme"]
    if args.policy_dir:
        argv += ["--policy-dir", args.policy_dir]
    if args.store:
        argv += ["--store", args.store]
    argv += ["approvals", "approve", approval, "--reason", "checked by ci"]
    out = subprocess.run(argv, capture_output=True, text=True, check=False)
    return out.returncode


async def scenario(args):
    observed = {}
    headers = {"Authorization": f"Bearer {args.token}"} if args.token else None
    async with create_mcp_http_client(headers=headers) as http:
        async with streamable_http_client(args.url, http_client=http) as streams:
            read, write = streams[0], streams[1]
            heard = []

            async def on_message(message):
                method = getattr(message, "method", None)
                if method is not None:
                    heard.append(method)

            async with ClientSession(read, write, message_handler=on_message) as session:
                init = await session.initialize()
                observed["protocol_version"] = init.protocol_version
                observed["server"] = init.server_info.name
                listed = await session.list_tools()
                observed["tools"] = sorted(t.name for t in listed.tools)
                if args.scenario == "call":
                    observed["slow"] = await call(session, "test__slow", {"seconds": 0})
                elif args.scenario == "scopes":
                    observed["slow"] = await call(session, "test__slow", {"seconds": 0})
                    observed["note"] = await call(session, "test__note", {})
                elif args.scenario == "list_changed":
                    observed["set"] = await call(session, "test__set_description", {"text": "changed over http"})
                    with anyio.move_on_after(20):
                        while "notifications/tools/list_changed" not in heard:
                            await anyio.sleep(0.1)
                    observed["notifications"] = sorted(set(heard))
                elif args.scenario == "concurrent":
                    parked, on_progress = approval_watcher()
                    order = []

                    with anyio.move_on_after(60) as scope:
                        async with anyio.create_task_group() as tg:

                            async def first():
                                observed["parked_call"] = await call(
                                    session, "test__append", {"text": "over http"}, on_progress
                                )
                                order.append("parked_call")

                            tg.start_soon(first)
                            while not parked:
                                await anyio.sleep(0.1)
                            # The parked call's stream is open; a second request on its own
                            # stream must be answered now, not after the first.
                            again = await session.list_tools()
                            observed["listed_while_parked"] = sorted(t.name for t in again.tools)
                            order.append("list")
                            observed["approve_exit"] = await anyio.to_thread.run_sync(approve, args, parked[0])
                    observed["timed_out"] = scope.cancelled_caught
                    observed["approval"] = parked[0] if parked else None
                    observed["order"] = order
                elif args.scenario == "waiting":
                    # SPEC 22.2, 22.3 over HTTP: a read answered beside a parked call; the
                    # parked call's request cancelled (a host's timeout) keeps its approval;
                    # the identical call sent again after approval returns the result; a call
                    # without a progressToken is answered at once.
                    parked, on_progress = approval_watcher()

                    with anyio.move_on_after(60) as scope:
                        async with anyio.create_task_group() as tg:

                            async def first():
                                observed["cancelled_answer"] = await call(
                                    session, "test__append", {"text": "waited"}, on_progress
                                )

                            tg.start_soon(first)
                            while not parked:
                                await anyio.sleep(0.1)
                            observed["beside"] = await call(session, "test__slow", {"seconds": 0})
                            tg.cancel_scope.cancel()
                    observed["timed_out"] = scope.cancelled_caught
                    observed["approval"] = parked[0] if parked else None
                    await anyio.sleep(1.5)
                    observed["approve_exit"] = await anyio.to_thread.run_sync(approve, args, parked[0])
                    observed["retry"] = await call(session, "test__append", {"text": "waited"}, on_progress)
                    observed["no_progress"] = await call(session, "test__append", {"text": "asked"})
                elif args.scenario == "leave":
                    # SPEC 22.3: a call without a progressToken is answered at once naming its
                    # approval; then the client ends its session (DELETE).
                    observed["asked"] = await call(session, "test__append", {"text": "rejoined"})
                    match = APPROVAL.search(observed["asked"].get("text", ""))
                    observed["approval"] = match.group(1) if match else None
                elif args.scenario == "rejoin":
                    # On a new session, the identical call binds to the approval the ended
                    # session asked for; approved, the call sent again returns the result.
                    observed["asked"] = await call(session, "test__append", {"text": "rejoined"})
                    match = APPROVAL.search(observed["asked"].get("text", ""))
                    observed["approval"] = match.group(1) if match else None
                    if observed["approval"]:
                        observed["approve_exit"] = await anyio.to_thread.run_sync(approve, args, observed["approval"])
                    observed["retry"] = await call(session, "test__append", {"text": "rejoined"})
                else:
                    raise SystemExit(f"unknown scenario {args.scenario}")
    return observed


async def probe(args):
    observed = {}
    headers = {"Authorization": f"Bearer {args.token}"} if args.token else None
    async with (
        create_mcp_http_client(headers=headers) as http,
        streamable_http_client(args.url, http_client=http) as streams,
        ClientSession(streams[0], streams[1]) as session,
    ):
        await negotiate_auto(session)
        observed["protocol_version"] = session.protocol_version
        observed["slow"] = await call(session, "test__slow", {"seconds": 0})
    return observed


async def modern(args):
    observed = {}
    headers = {"Authorization": f"Bearer {args.token}"} if args.token else None
    urls = args.url.split(",")
    for turn, url in enumerate([urls[0], urls[-1]]):
        async with (
            create_mcp_http_client(headers=headers) as http,
            streamable_http_client(url, http_client=http) as streams,
            ClientSession(streams[0], streams[1]) as session,
        ):
            await negotiate_auto(session)
            if turn == 0:
                observed["protocol_version"] = session.protocol_version
                listed = await session.list_tools()
                observed["tools"] = sorted(t.name for t in listed.tools)
                observed["list_cache"] = [listed.ttl_ms, listed.cache_scope]
                observed["slow"] = await call(session, "test__slow", {"seconds": 0})
            else:
                observed["asked"] = await call(session, "test__append", {"text": "stateless"})
                match = APPROVAL.search(observed["asked"].get("text", ""))
                observed["approval"] = match.group(1) if match else None
                if observed["approval"]:
                    observed["approve_exit"] = await anyio.to_thread.run_sync(approve, args, observed["approval"])
                observed["retry"] = await call(session, "test__append", {"text": "stateless"})
    return observed


def approve_pending(args):
    """Approves the one pending approval from another process (`approvals list`, then
    `approvals approve`)."""
    argv = [args.airlock, "--data-dir", args.data, "--tenant", "acme"]
    if args.store:
        argv += ["--store", args.store]
    out = subprocess.run(argv + ["approvals", "list"], capture_output=True, text=True, check=False)
    try:
        listed = json.loads(out.stdout)
    except json.JSONDecodeError:
        listed = []
    items = listed.get("items", listed) if isinstance(listed, dict) else listed
    pending = [a["id"] for a in items if isinstance(a, dict) and a.get("status") == "pending"]
    code = approve(args, pending[0]) if pending else None
    return {"pending": len(pending), "approve_exit": code}


async def rounds(args):
    """`rounds` and `task` (SPEC 22.3, 23) with the SDK's session over Streamable HTTP at
    2026-07-28: see modern_rounds.py."""
    headers = {"Authorization": f"Bearer {args.token}"} if args.token else None

    async def elicitation(context, params):
        return types.ElicitResult(action="decline")

    async def no_roots(context):
        return types.ListRootsResult(roots=[])

    kwargs = {"elicitation_callback": elicitation, "list_roots_callback": no_roots}
    if args.scenario in ("task", "task_poll"):
        kwargs = {"extensions": {"io.modelcontextprotocol/tasks": {}}}
    async with (
        create_mcp_http_client(headers=headers) as http,
        streamable_http_client(args.url, http_client=http) as streams,
        ClientSession(streams[0], streams[1], **kwargs) as session,
    ):
        await negotiate_auto(session)
        observed = {"protocol_version": session.protocol_version}
        if args.scenario in ("task", "task_poll"):

            async def poll(task_id):
                # 2026-07-28 over HTTP names the task in `Mcp-Name` (SEP-2243), which the SDK's
                # tasks/get (a 2025-11-25 model) does not set: a client of its own sets it.
                named = dict(headers or {}, **{"Mcp-Name": task_id})
                async with (
                    create_mcp_http_client(headers=named) as http,
                    streamable_http_client(args.url, http_client=http) as streams,
                    ClientSession(streams[0], streams[1], **kwargs) as poller,
                ):
                    await negotiate_auto(poller)
                    return await modern_rounds.get_task(poller, task_id)

        if args.scenario == "task_poll":
            observed["final"] = await modern_rounds.poll_task(args.arg, poll)
        elif args.scenario == "task":
            observed.update(
                await modern_rounds.approval_task(
                    session, "http-task", lambda: approve_pending(args), poll
                )
            )
        else:
            observed.update(await modern_rounds.input_rounds(session, "http-form"))
    return observed


BELOW_ERROR = {"debug", "info", "notice", "warning"}


async def logs(args):
    observed = {"strict": [], "chatty": []}
    headers = {"Authorization": f"Bearer {args.token}"} if args.token else None

    def heard(name):
        async def on_log(params):
            observed[name].append(params.level)

        return on_log

    async with (
        create_mcp_http_client(headers=headers) as http_strict,
        create_mcp_http_client(headers=headers) as http_chatty,
        streamable_http_client(args.url, http_client=http_strict) as s,
        streamable_http_client(args.url, http_client=http_chatty) as c,
        ClientSession(s[0], s[1], logging_callback=heard("strict")) as strict,
        ClientSession(c[0], c[1], logging_callback=heard("chatty")) as chatty,
    ):
        await strict.initialize()
        await strict.set_logging_level("error")
        await chatty.initialize()
        await chatty.set_logging_level("debug")
        observed["toggle"] = await call(chatty, "everything__toggle-simulated-logging", {})
        # The message the tool sends at once comes during the call, to its client alone; only
        # what comes after the call's answer is outside any call.
        during = len(observed["chatty"])
        with anyio.move_on_after(60):
            while True:
                outside = set(observed["chatty"][during:])
                if outside & BELOW_ERROR and outside - BELOW_ERROR:
                    break
                await anyio.sleep(0.2)
        # The same message reaches the other session's stream a moment later, if at all.
        await anyio.sleep(1)
        observed["chatty_during_call"] = observed["chatty"][:during]
        observed["chatty"] = observed["chatty"][during:]
    return observed


def main():
    args = parse_args()
    run = {
        "logs": logs,
        "auto": probe,
        "modern": modern,
        "rounds": rounds,
        "task": rounds,
        "task_poll": rounds,
    }.get(args.scenario, scenario)
    print(json.dumps(anyio.run(run, args)))


if __name__ == "__main__":
    main()
