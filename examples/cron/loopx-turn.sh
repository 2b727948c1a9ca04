#!/bin/sh
# One governed agent turn for cron: quiet unless loopx says the turn is worth running.
#
#   */15 * * * * chronic /path/to/loopx-turn.sh /path/to/project
#
# - `flock -n -E 0` turns an overlapping start into a silent no-op (exit 0): turns never stack.
# - `loopx quota should-run` is the gate: exit 0 = run, 1 = a clean "no" (skip, wait, gate
#   pending, paused, budget spent), 3 = the store cannot be read. The script maps 1 to 0 so that
#   under `chronic` only real problems produce mail.
# - `loopx run --once` takes at most one turn, verifies it and spends budget only on verified
#   progress. It exits 0 when it worked or cleanly skipped, 1 when the agent failed or timed out.
# Set LOOPX_CRON_AGENT to claude-code, codex, cursor, opencode or gemini (default claude-code).
# The goal needs a permission mode chosen once by a human (`loopx goal update GOAL --permission-mode
# edit`; read-only, edit or full, see docs/usage.md), else the run refuses instead of a silent no-op.
set -u
PROJECT=${1:?usage: loopx-turn.sh PROJECT_DIR}
AGENT=${LOOPX_CRON_AGENT:-claude-code}
cd "$PROJECT" || exit 2
exec flock -n -E 0 .loopx/cache/cron.lock sh -c '
  loopx quota should-run --quiet
  case $? in
    0) ;;
    1) exit 0 ;;
    *) echo "loopx-turn: should-run failed in $PWD (see loopx doctor)" >&2; exit 3 ;;
  esac
  exec loopx --agent "$1" run --once --timeout 30m
' sh "$AGENT"
