#!/usr/bin/env python3
"""What e2e/demo.sh shows of the agent's side, in words: it turns the agent's JSON line and the
sidecar's audit lines into a few readable lines (the raw JSON stays in the demo's logs).

    demo_story.py agent STEPS_JSON < the agent's output (one JSON line among its log lines)
    demo_story.py audit < the sidecar's log (JSON lines; those of target mcp_sidecar::audit)
    demo_story.py grants < a grants document (the grants ConfigMap's grants.json)

STEPS_JSON is the list of steps the agent was given (tests/fixtures/ts_client.mjs and
sdk_client.py take the same ones and print the same shape), so each result is told next to
what was asked.
"""

import json
import sys


def short(text, limit=110):
    text = " ".join((text or "").split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def result_line():
    """The agent's result: the last log line that is a JSON object with steps."""
    for line in reversed(sys.stdin.read().splitlines()):
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if isinstance(doc, dict) and isinstance(doc.get("steps"), list):
            return doc
    sys.exit("the agent printed no result line")


def call_outcome(result):
    if "error" in result:
        return "error", short(result["error"].get("message"))
    if result.get("isError"):
        return "refused", short(result.get("text"))
    return "ok", short(result.get("text"))


def agent(steps_json):
    steps = json.loads(steps_json)
    out = result_line()
    asked = list(out.get("elicitations") or [])
    before = None
    n = 0
    for step, result in zip(steps, out["steps"]):
        n += 1
        if step["op"] == "list":
            before = result["names"]
            print(f"  {n}. lists its tools ({len(before)}): {' '.join(before)}")
        elif step["op"] == "call":
            outcome, text = call_outcome(result)
            print(f"  {n}. calls {step['name']}: {outcome}" + (f" — {text}" if text else ""))
            # An approval the sidecar asked for during this call (the client answers in order).
            if outcome == "ok" and asked and step["name"].split("__", 1)[-1] in asked[0]["message"]:
                first = asked.pop(0)["message"].splitlines()[0]
                print(f"     (its client was asked first — \"{short(first, 120)}\" — and said yes)")
        elif step["op"] == "wait_list_changed":
            if not result.get("changed"):
                print(f"  {n}. waited {step.get('timeout')}s for list_changed: none came")
                continue
            now = result["names"]
            gone = [t for t in (before or []) if t not in now]
            added = [t for t in now if t not in (before or [])]
            print(f"  {n}. gets notifications/tools/list_changed and lists again ({len(now)}): {' '.join(now)}")
            if gone:
                print(f"     gone: {' '.join(gone)}")
            if added:
                print(f"     new: {' '.join(added)}")
            before = now
    for left in asked:
        print(f"  (its client was also asked: \"{short(left['message'].splitlines()[0], 120)}\")")


def grants():
    doc = json.load(sys.stdin)
    for server in doc.get("servers", []):
        state = "available" if server.get("available") else "not available"
        if server.get("optional"):
            state += ", optional"
        url = (server.get("endpoint") or {}).get("url", "?")
        print(f"  {server['name']} ({state}; {url}):")
        for tool in server.get("tools", []):
            notes = [tool.get("access", "?")]
            if tool.get("requiresApproval"):
                notes.append("needs approval")
            print(f"    {tool['qualifiedName']:<22} {', '.join(notes)}")
        if not server.get("tools"):
            print("    (no tools granted)")


def audit():
    for line in sys.stdin:
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if doc.get("target") != "mcp_sidecar::audit":
            continue
        f = doc.get("fields", doc)
        when = str(doc.get("timestamp", ""))[11:19]
        print(
            f"  {when}  {f.get('tool') or f.get('raw_tool') or '?':<22} {f.get('decision', '?'):<15}"
            f" {f.get('outcome', '?'):<10} server={f.get('server') or '-'} access={f.get('access') or '-'}"
            f" {float(f.get('duration_ms', 0)):.0f}ms"
        )


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "agent":
        agent(sys.argv[2])
    elif len(sys.argv) == 2 and sys.argv[1] == "audit":
        audit()
    elif len(sys.argv) == 2 and sys.argv[1] == "grants":
        grants()
    else:
        sys.exit(__doc__)
