"""The body shared by loopx's OpenCode plugin and Pi extension: run ``loopx hook pre-tool`` with
the tool call as JSON on stdin (no shell, so no quoting on any platform) and return the reason
when loopx denies it. A loopx that cannot start, crashes or answers with something that is not
JSON also refuses the call (fail closed) and says to run ``loopx doctor``."""

from __future__ import annotations

import json

MARK = "loopx-managed-guard"


def check_function(argv: list[str], host: str, ts: bool, read_only=()) -> str:
    s = ": string" if ts else ""
    n = ": string | null" if ts else ""
    a = ": any" if ts else ""
    return f"""// {MARK}: written by `loopx hooks --install --host {host}`; `loopx hooks --remove` deletes it.
// Every tool call goes through `loopx hook pre-tool --host {host}`, which refuses protected
// actions without a human-approved gate, edits outside the goal's scope and edits to .loopx/.
import {{ spawnSync }} from "node:child_process";

const LOOPX = {json.dumps(argv)};  // the loopx that installed this file (absolute path)
const READ_ONLY = new Set({json.dumps(sorted(read_only))});  // built-in tools that never write

function loopxCheck(tool{s}, args{a}, cwd{s}, session{s}){n} {{
  if (READ_ONLY.has(tool)) return null;
  const payload = JSON.stringify({{ tool_name: tool, tool_input: args ?? {{}}, cwd, session_id: session }});
  const res = spawnSync(LOOPX[0], [...LOOPX.slice(1), "hook", "pre-tool", "--host", "{host}"],
    {{ input: payload, encoding: "utf8", timeout: 30000, windowsHide: true }});
  if (res.error || (res.status !== 0 && res.status !== 2)) {{
    const why = res.error ? res.error.message : `exit code ${{res.status}}`;
    return `loopx could not check this tool call (${{why}}), so it is refused. Ask a human to run \\`loopx doctor\\`.`;
  }}
  let answer{a} = {{}};
  try {{
    answer = JSON.parse(res.stdout || "{{}}");
  }} catch {{
    return "loopx's answer was not JSON, so this tool call is refused. Ask a human to run `loopx doctor`.";
  }}
  return answer && answer.decision === "deny" ? String(answer.reason || "refused by loopx") : null;
}}
"""
