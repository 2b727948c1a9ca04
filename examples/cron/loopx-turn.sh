#!/bin/sh
# One governed agent turn for cron: quiet unless loopx says the turn is worth running.
#
#   */15 * * * * chronic /path/to/loopx-turn.sh /path/to/project
#
# - Cron runs jobs with a minimal PATH (often /usr/bin:/bin), where a loopx installed in a venv,
#   with pipx or in ~/.local/bin is not found. Set LOOPX_BIN to loopx's absolute path, or PATH at
#   the top of the crontab; `loopx schedule --cron` prints both filled in for this machine.
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
LOOPX=${LOOPX_BIN:-loopx}
if ! command -v "$LOOPX" >/dev/null 2>&1; then
  echo "loopx-turn: '$LOOPX' is not on PATH (PATH=$PATH): cron starts jobs with a minimal PATH." >&2
  echo "loopx-turn: set LOOPX_BIN=/absolute/path/to/loopx or PATH=... at the top of the crontab;" >&2
  echo "loopx-turn: \`loopx schedule --cron\` (run in your shell) prints the line with both filled in." >&2
  exit 127
fi
cd "$PROJECT" || exit 2
exec flock -n -E 0 .loopx/cache/cron.lock sh -c '
  "$2" quota should-run --quiet
  case $? in
    0) ;;
    1) exit 0 ;;
    *) echo "loopx-turn: should-run failed in $PWD (see: $2 doctor)" >&2; exit 3 ;;
  esac
  exec "$2" --agent "$1" run --once --timeout 30m
' sh "$AGENT" "$LOOPX"
