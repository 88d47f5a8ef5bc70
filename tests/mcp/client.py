"""The MCP client of airlock's gateway tests (SPEC §19.5): the Python `mcp` SDK, driving
`airlock mcp serve` over stdio. Each scenario prints one JSON object of what it observed on
stdout; tests/tests/mcp_gateway.rs asserts on it. Nothing here decides pass or fail.

usage: client.py SCENARIO --airlock BIN --data DIR --config FILE [--policy-dir DIR] [--store URL]
                 [--mode legacy|modern] [--ledger FILE] [--pidfile FILE] [--arg VALUE]
"""

import argparse
import json
import os
import re
import time
import subprocess
import sys

import anyio
import mcp_types as types
from mcp.client._probe import negotiate_auto
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.shared.exceptions import MCPError

import modern_rounds

APPROVAL = re.compile(r"approval ([0-9a-f-]{36})")


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("scenario")
    p.add_argument("--airlock", required=True)
    p.add_argument("--data", required=True)
    p.add_argument("--config", required=True)
    p.add_argument("--policy-dir")
    p.add_argument("--mode", default="legacy", choices=["legacy", "modern"])
    p.add_argument("--ledger")
    p.add_argument("--pidfile")
    p.add_argument("--arg", default="")
    p.add_argument("--lease-ms", default="30000")
    # A store other than the data dir's SQLite file (a PostgreSQL URL): passed as --store, since
    # the SDK starts the gateway with a minimal environment that has no AIRLOCK_STORE.
    p.add_argument("--store")
    return p.parse_args()


class Gateway:
    """One `airlock mcp serve` child and a client session on it."""

    def __init__(self, args, elicitation=None):
        self.args = args
        self.elicitation = elicitation
        self.notifications = []
        self.updated_uris = []
        # The progressToken of every progress notification, as it came on the wire.
        self.progress_tokens = []

    def params(self):
        argv = [self.args.airlock, "--data-dir", self.args.data]
        if self.args.store:
            argv += ["--store", self.args.store]
        if self.args.policy_dir:
            argv += ["--policy-dir", self.args.policy_dir]
        argv += ["mcp", "serve", "--config", self.args.config, "--lease-ms", self.args.lease_ms]
        if self.args.pidfile:
            # exec keeps the pid, so the test can kill the gateway itself.
            script = 'echo $$ > "$0"; exec "$@"'
            return StdioServerParameters(command="/bin/sh", args=["-c", script, self.args.pidfile] + argv)
        return StdioServerParameters(command=argv[0], args=argv[1:])

    async def on_message(self, message):
        method = getattr(message, "method", None)
        if method is not None:
            self.notifications.append(method)
            if method == "notifications/resources/updated":
                self.updated_uris.append(getattr(getattr(message, "params", None), "uri", None))
        if method == "notifications/progress":
            self.progress_tokens.append(message.params.progress_token)


def airlock(args, *command):
    argv = [args.airlock, "--data-dir", args.data, "--tenant", "acme"]
    if args.store:
        argv += ["--store", args.store]
    if args.policy_dir:
        argv += ["--policy-dir", args.policy_dir]
    out = subprocess.run(argv + list(command), capture_output=True, text=True, check=False)
    try:
        return json.loads(out.stdout)
    except json.JSONDecodeError:
        return {"stdout": out.stdout, "stderr": out.stderr, "code": out.returncode}


def approval_watcher():
    """A progress callback that keeps the first approval id a progress message names, and the
    list it keeps it in."""
    seen = []

    async def on_progress(value, total, message):
        match = APPROVAL.search(message or "")
        if match and not seen:
            seen.append(match.group(1))

    return seen, on_progress


def result_json(result):
    if isinstance(result, types.CallToolResult):
        return {
            "is_error": bool(result.is_error),
            "text": "".join(c.text for c in result.content if isinstance(c, types.TextContent)),
            "structured": result.structured_content,
        }
    return {"other": repr(result)}


def ledger_lines(args):
    if not args.ledger or not os.path.exists(args.ledger):
        return []
    with open(args.ledger, encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


async def connect(session, args):
    if args.mode == "modern":
        await negotiate_auto(session)
    else:
        await session.initialize()
    return session.protocol_version


async def call(session, name, arguments, on_progress=None):
    try:
        return result_json(await session.call_tool(name, arguments, progress_callback=on_progress))
    except MCPError as e:
        return {"error_code": e.error.code, "error_message": e.error.message}


async def parked_call(session, args, name, arguments, resolve):
    """Calls `name`; when a progress notification names the approval, runs `resolve(id)`."""
    progress = []
    resolved = []

    async def on_progress(value, total, message):
        progress.append(message)
        match = APPROVAL.search(message or "")
        if match and not resolved:
            resolved.append(match.group(1))
            await anyio.to_thread.run_sync(resolve, match.group(1))

    result = await call(session, name, arguments, on_progress)
    return {"result": result, "progress": progress, "approval": resolved[0] if resolved else None}


async def attempt(coro):
    """Awaits a request; its JSON result, or the MCP error it was answered with."""
    try:
        result = await coro
        return {"ok": result.model_dump(mode="json", by_alias=True, exclude_none=True)}
    except MCPError as e:
        return {"error_code": e.error.code, "error_message": e.error.message, "error_data": e.error.data}


async def wait_for(gateway, method, seconds=30):
    for _ in range(seconds * 10):
        if method in gateway.notifications:
            return True
        await anyio.sleep(0.1)
    return False


async def resources(session, gateway, args, observed):
    """SPEC 19.6 through the gateway: resources, templates, prompts, completion, logging,
    subscriptions, and the read gate's refusals. `args.arg` is the exposed URI prefix of the
    server-everything upstream ("everything+" or "" when it is unprefixed), and the prompt
    prefix follows from it."""
    uri_prefix = args.arg
    name_prefix = uri_prefix[:-1] + "__" if uri_prefix else ""
    caps = session.server_capabilities
    observed["capabilities"] = caps.model_dump(mode="json", by_alias=True, exclude_none=True) if caps else None
    listed = await session.list_resources()
    observed["resources"] = sorted(r.uri for r in listed.resources)
    templates = await session.list_resource_templates()
    observed["templates"] = sorted(t.uri_template for t in templates.resource_templates)
    text_uri = next(u for u in observed["resources"] if u.startswith(uri_prefix + "demo://resource/static/document/"))
    observed["text_uri"] = text_uri
    observed["read_text"] = await attempt(session.read_resource(text_uri))
    observed["read_blob"] = await attempt(session.read_resource(uri_prefix + "demo://resource/dynamic/blob/1"))
    prompts = await session.list_prompts()
    observed["prompts"] = sorted(p.name for p in prompts.prompts)
    observed["prompt"] = await attempt(session.get_prompt(name_prefix + "args-prompt", {"city": "Paris", "state": "TX"}))
    observed["completion"] = await attempt(
        session.complete(types.PromptReference(type="ref/prompt", name=name_prefix + "completable-prompt"), {"name": "department", "value": "E"})
    )
    observed["set_level"] = await attempt(session.set_logging_level("debug"))
    observed["subscribe"] = await attempt(session.subscribe_resource(text_uri))
    observed["toggle"] = await call(session, name_prefix + "toggle-subscriber-updates", {})
    observed["updated_seen"] = await wait_for(gateway, "notifications/resources/updated")
    observed["updated_uris"] = gateway.updated_uris
    observed["unsubscribe"] = await attempt(session.unsubscribe_resource(text_uri))
    observed["toggle_off"] = await call(session, name_prefix + "toggle-subscriber-updates", {})
    observed["shadow"] = await attempt(session.read_resource(uri_prefix + "file:///etc/shadow"))
    observed["unknown_prompt"] = await attempt(session.get_prompt(name_prefix + "no-such-prompt-x", {}))
    if uri_prefix:
        observed["unknown_server"] = await attempt(session.read_resource("nosuch+demo://resource/static/document/x"))
        # The test server's reads need mcp.test.read, which the principal does not hold.
        observed["scope_refused"] = await attempt(session.read_resource("test+demo://anything"))


async def scenario(args):
    observed = {}
    elicitation = None
    if args.scenario in ("elicit_accept", "elicit_decline"):
        answer = args.scenario

        async def elicitation(context, params):
            observed["elicitation_message"] = params.message
            if answer == "elicit_accept":
                return types.ElicitResult(action="accept", content={"approve": True})
            return types.ElicitResult(action="decline")

    if args.scenario in ("relays", "ask"):
        # Answers what the upstream asks through airlock, and records what it was asked.
        async def elicitation(context, params):
            observed.setdefault("elicited", []).append(params.message)
            return types.ElicitResult(action="decline")

    if args.scenario == "rounds":
        # Declares form elicitation (and roots below); at 2026-07-28 nothing is asked through
        # the callback: the rounds come back as input-required results.
        async def elicitation(context, params):
            observed.setdefault("elicited", []).append(params.message)
            return types.ElicitResult(action="decline")

    gateway = Gateway(args, elicitation)
    async with stdio_client(gateway.params()) as (read, write):
        kwargs = {"message_handler": gateway.on_message}
        if elicitation is not None:
            kwargs["elicitation_callback"] = elicitation
        if args.scenario in ("relays", "ask"):

            async def sampling(context, params):
                observed.setdefault("sampled", []).append(
                    [m.content.text for m in params.messages if isinstance(m.content, types.TextContent)]
                )
                return types.CreateMessageResult(
                    role="assistant",
                    content=types.TextContent(type="text", text="sampled by the python client"),
                    model="client-model-7",
                    stop_reason="endTurn",
                )

            async def roots(context):
                observed["roots_asked"] = observed.get("roots_asked", 0) + 1
                return types.ListRootsResult(roots=[types.Root(uri="file:///relayed/root", name="relayed-root")])

            async def logging(params):
                observed.setdefault("logs", []).append({"level": params.level, "data": params.data})

            kwargs["sampling_callback"] = sampling
            kwargs["list_roots_callback"] = roots
            kwargs["logging_callback"] = logging
        if args.scenario == "rounds":

            async def no_roots(context):
                return types.ListRootsResult(roots=[])

            kwargs["list_roots_callback"] = no_roots
        if args.scenario == "task":
            kwargs["extensions"] = {"io.modelcontextprotocol/tasks": {}}
        async with ClientSession(read, write, **kwargs) as session:
            observed["protocol_version"] = await connect(session, args)
            listed = await session.list_tools()
            observed["tools"] = sorted(t.name for t in listed.tools)
            s = args.scenario
            if s == "basic":
                observed["read"] = await call(session, "files__read_text_file", {"path": args.arg})
                observed["unknown"] = await call(session, "files__no_such_tool", {})
                observed["matrix_denied"] = await call(
                    session, "files__move_file", {"source": args.arg, "destination": args.arg + ".moved"}
                )
                observed["hardline_denied"] = await call(
                    session, "files__write_file", {"path": "/etc/airlock-test", "content": "x"}
                )
            elif s == "allowed_directories":
                # server-filesystem takes its roots asynchronously after it started; ask until
                # it names the expected directory, or give up after 10 s and report what it said.
                for _ in range(50):
                    observed["allowed"] = await call(session, "files__list_allowed_directories", {})
                    if args.arg in observed["allowed"].get("text", ""):
                        break
                    await anyio.sleep(0.2)
            elif s in ("approve", "reviewer_deny"):
                verb = "approve" if s == "approve" else "deny"

                def resolve(approval):
                    observed["resolve"] = airlock(args, "approvals", verb, approval, "--reason", "checked by ci")

                observed.update(await parked_call(session, args, "test__append", {"text": args.arg}, resolve))
            elif s == "taint":
                observed["before"] = await call(session, "test__append", {"text": "before"})
                observed["read"] = await call(session, "test__note", {})

                def resolve(approval):
                    observed["resolve"] = airlock(args, "approvals", "approve", approval, "--reason", "ok")

                observed["after"] = await parked_call(session, args, "test__append", {"text": "after"}, resolve)
            elif s == "taint_concurrent":
                # SPEC 22.2 across concurrent calls: a write in flight when an untrusted result
                # is answered was proposed untainted and finishes without approval; a write
                # sent after that answer is tainted and waits for approval.
                async with anyio.create_task_group() as tg:

                    async def in_flight():
                        observed["in_flight"] = await call(
                            session, "test__append", {"text": "in-flight", "delay_seconds": 3}
                        )

                    tg.start_soon(in_flight)
                    for _ in range(200):
                        if "in-flight" in ledger_lines(args):
                            break
                        await anyio.sleep(0.05)
                    observed["read"] = await call(session, "test__note", {})
                    observed["in_flight_done_at_read"] = "in_flight" in observed

                    def resolve(approval):
                        observed["resolve"] = airlock(args, "approvals", "approve", approval, "--reason", "ok")

                    observed["after"] = await parked_call(session, args, "test__append", {"text": "after"}, resolve)
                observed["conversations"] = airlock(args, "conversations", "list")
            elif s == "resources":
                await resources(session, gateway, args, observed)
            elif s == "resource_taint":
                # A resource read (of URI `args.arg`, none when empty) on a fresh connection,
                # then a write. (Every result of the test server taints, so the read comes first.)
                if args.arg:
                    observed["read"] = await attempt(session.read_resource(args.arg))

                def resolve(approval):
                    observed["resolve"] = airlock(args, "approvals", "approve", approval, "--reason", "ok")

                observed["after"] = await parked_call(session, args, "test__append", {"text": "after"}, resolve)
            elif s in ("elicit_accept", "elicit_decline"):
                observed.update(await parked_call(session, args, "test__append", {"text": args.arg}, lambda _: None))
            elif s == "cancel":
                # A host that gives up on a parked call (its tool timeout): the request is
                # cancelled, the approval stays pending (SPEC 22.3), the conversation goes on,
                # and the identical call sent again binds to the approved run.
                approvals, on_progress = approval_watcher()

                with anyio.move_on_after(60) as scope:
                    async with anyio.create_task_group() as tg:

                        async def parked():
                            observed["answer"] = await call(session, "test__append", {"text": args.arg}, on_progress)

                        tg.start_soon(parked)
                        while not approvals:
                            await anyio.sleep(0.1)
                        # Cancelling the request sends notifications/cancelled.
                        tg.cancel_scope.cancel()
                observed["timed_out"] = scope.cancelled_caught
                observed["approval"] = approvals[0] if approvals else None
                # Give the gateway time to apply the cancel, then look from another process.
                await anyio.sleep(1.5)
                observed["approval_after"] = airlock(args, "approvals", "get", observed["approval"])
                observed["next"] = await call(session, "test__slow", {"seconds": 0})
                observed["resolve"] = airlock(args, "approvals", "approve", observed["approval"], "--reason", "after the host gave up")
                await anyio.sleep(1.0)
                observed["ledger_before_retry"] = ledger_lines(args)
                observed["retry"] = await call(session, "test__append", {"text": args.arg}, on_progress)
            elif s == "files_waiting":
                # SPEC 22.2, 22.3 with the real server-filesystem as `web` (args.arg: its
                # directory), whose write waits for approval: a read is answered beside it; the
                # host gives up on the write, the reviewer approves, and the identical write
                # sent again writes once.
                a_txt = os.path.join(args.arg, "a.txt")
                out = os.path.join(args.arg, "out.txt")
                observed["first_read"] = await call(session, "web__read_text_file", {"path": a_txt})
                approvals, on_progress = approval_watcher()
                with anyio.move_on_after(60) as scope:
                    async with anyio.create_task_group() as tg:

                        async def parked():
                            observed["cancelled_answer"] = await call(
                                session, "web__write_file", {"path": out, "content": "approved\n"}, on_progress
                            )

                        tg.start_soon(parked)
                        while not approvals and "cancelled_answer" not in observed:
                            await anyio.sleep(0.1)
                        observed["beside"] = await call(session, "web__read_text_file", {"path": a_txt})
                        tg.cancel_scope.cancel()
                observed["timed_out"] = scope.cancelled_caught
                observed["approval"] = approvals[0] if approvals else None
                if not approvals:
                    # It did not wait for approval: what it was answered tells why.
                    return observed
                await anyio.sleep(1.5)
                observed["approval_after"] = airlock(args, "approvals", "get", observed["approval"]).get("status")
                observed["written_before_retry"] = os.path.exists(out)
                observed["resolve"] = airlock(args, "approvals", "approve", observed["approval"], "--reason", "ok")
                observed["retry"] = await call(session, "web__write_file", {"path": out, "content": "approved\n"}, on_progress)
            elif s == "no_progress":
                # A host that sends no progressToken is told at once (SPEC 22.3), then retries.
                started = time.monotonic()
                observed["first"] = await call(session, "test__append", {"text": args.arg})
                observed["first_seconds"] = time.monotonic() - started
                match = APPROVAL.search(observed["first"].get("text", ""))
                observed["approval"] = match.group(1) if match else None
                observed["pending_again"] = await call(session, "test__append", {"text": args.arg})
                observed["resolve"] = airlock(args, "approvals", "approve", observed["approval"], "--reason", "ok")
                observed["retry"] = await call(session, "test__append", {"text": args.arg})
            elif s == "read_while_parked":
                # An allowed call is answered while another call of the conversation waits for
                # its approval (SPEC 22.2).
                started = time.monotonic()
                observed["unblocked"] = await call(session, "test__slow", {"seconds": 0})
                observed["unblocked_seconds"] = time.monotonic() - started
                approvals, on_progress = approval_watcher()

                async with anyio.create_task_group() as tg:

                    async def parked():
                        observed["write"] = await call(session, "test__append", {"text": args.arg}, on_progress)

                    tg.start_soon(parked)
                    while not approvals:
                        await anyio.sleep(0.1)
                    started = time.monotonic()
                    observed["read"] = await call(session, "test__slow", {"seconds": 0})
                    observed["read_seconds"] = time.monotonic() - started
                    observed["write_pending"] = airlock(args, "approvals", "get", approvals[0]).get("status")
                    observed["resolve"] = airlock(args, "approvals", "approve", approvals[0], "--reason", "ok")
            elif s == "park":
                # A call that waits for approval with progress, until the test kills the
                # gateway (SPEC 22.3: the approval outlives it).
                approvals, on_progress = approval_watcher()
                observed["answer"] = await call(session, "test__append", {"text": args.arg}, on_progress)
            elif s == "kill":
                # The effect happens, then the answer waits; the test kills the gateway.
                observed["answer"] = await call(session, "test__append", {"text": args.arg, "delay_seconds": 60})
            elif s == "repeat":
                observed["answer"] = await call(session, "test__append", {"text": args.arg, "delay_seconds": 60})
            elif s == "list_notices":
                # The upstream announces resource and prompt list changes; the client must hear
                # both (SPEC 19.6), relayed outside any call.
                observed["announce"] = await call(session, "test__announce_lists", {})
                observed["resources_seen"] = await wait_for(gateway, "notifications/resources/list_changed")
                observed["prompts_seen"] = await wait_for(gateway, "notifications/prompts/list_changed")
                observed["notifications"] = sorted(set(gateway.notifications))
            elif s == "pin":
                observed["before"] = await call(session, "test__mutable", {})
                observed["set"] = await call(session, "test__set_description", {"text": "now with a new purpose"})
                for _ in range(100):
                    if "notifications/tools/list_changed" in gateway.notifications:
                        break
                    await anyio.sleep(0.1)
                listed = await session.list_tools()
                observed["tools_after"] = sorted(t.name for t in listed.tools)
                observed["after"] = await call(session, "test__mutable", {})
            elif s == "changed":
                # A parked call of `web__mutable`; the definition changes on the HTTP upstream
                # meanwhile (the test does that), then the approval comes.
                def resolve(approval):
                    observed["approval_seen"] = approval
                    subprocess.run([sys.executable, __file__, "set_http_description", "--airlock", "-", "--data", "-", "--config", "-", "--arg", args.arg], check=False)
                    for _ in range(100):
                        if "notifications/tools/list_changed" in gateway.notifications:
                            break
                        import time

                        time.sleep(0.1)
                    observed["resolve"] = airlock(args, "approvals", "approve", approval, "--reason", "ok")

                observed.update(await parked_call(session, args, "web__mutable", {}, resolve))
                observed["notifications"] = sorted(set(gateway.notifications))
            elif s == "relays":
                steps = []
                # server-everything asks for its roots 350 ms after its `initialized` (its
                # syncRoots timer); that request must find no call in flight, so it is answered
                # the gateway file's roots. The gateway announces itself once its upstreams are
                # up, so waiting 1 s here keeps the first call clear of it.
                await anyio.sleep(1)

                async def on_progress(value, total, message):
                    steps.append([value, total])

                observed["long"] = await call(
                    session, "everything__trigger-long-running-operation", {"duration": 1.5, "steps": 3}, on_progress
                )
                observed["progress"] = steps
                observed["progress_tokens"] = [str(t) for t in gateway.progress_tokens]
                observed["sampling"] = await call(
                    session, "everything__trigger-sampling-request", {"prompt": "relay me", "maxTokens": 20}
                )
                observed["elicitation"] = await call(session, "everything__trigger-elicitation-request", {})
                observed["roots"] = await call(session, "everything__get-roots-list", {})
                # The project's test server asks for the client's roots during its call.
                observed["test_roots"] = await call(session, "test__roots", {})
                # server-everything sends one log message at once, during this call.
                before = len(observed.get("logs", []))
                observed["toggle"] = await call(session, "everything__toggle-simulated-logging", {})
                observed["logs_during_toggle"] = observed.get("logs", [])[before:]
            elif s == "ask":
                # The project's test server asks for sampling during its call `ask`.
                observed["ask"] = await call(session, "test__ask", {"prompt": "relay me"})
            elif s == "rounds":
                observed.update(await modern_rounds.input_rounds(session, args.arg))
            elif s == "task":
                observed.update(
                    await modern_rounds.approval_task(session, args.arg, lambda: approve_pending(args))
                )
            else:
                raise SystemExit(f"unknown scenario {s}")
            observed["notifications"] = sorted(set(gateway.notifications))
    observed["ledger"] = ledger_lines(args)
    return observed


def approve_pending(args):
    """Approves the one pending approval from another process: how many were pending, and
    what the CLI said."""
    listed = airlock(args, "approvals", "list")
    items = listed.get("items", listed) if isinstance(listed, dict) else listed
    pending = [a["id"] for a in items if isinstance(a, dict) and a.get("status") == "pending"]
    answer = airlock(args, "approvals", "approve", pending[0], "--reason", "ok") if pending else None
    return {"pending": len(pending), "approve": answer}


async def set_http_description(url):
    """Changes `mutable` on the Streamable HTTP test server at `url` (another client)."""
    from mcp.client.streamable_http import streamable_http_client

    async with streamable_http_client(url) as streams:
        read, write = streams[0], streams[1]
        async with ClientSession(read, write) as session:
            await session.initialize()
            await session.call_tool("set_description", {"text": "changed over http"})


def main():
    args = parse_args()
    if args.scenario == "set_http_description":
        anyio.run(set_http_description, args.arg)
        return
    observed = anyio.run(scenario, args)
    print(json.dumps(observed))


if __name__ == "__main__":
    main()
