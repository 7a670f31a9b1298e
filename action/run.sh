#!/usr/bin/env bash
# The run step of action.yml: kimicode -p with the inputs (from KC_* variables), outputs to $GITHUB_OUTPUT.
# Exits with kimicode's exit code (0 ok, 1 failure, 3 max turns, 4 budget, 75 transient) after writing them.
set -uo pipefail

if [ -z "${KC_API_KEY:-}" ]; then
    echo "::error::kimicode: the api-key input is empty (pass a secret, e.g. \${{ secrets.KIMI_API_KEY }})"
    exit 2
fi
echo "::add-mask::$KC_API_KEY"
export KIMI_API_KEY="$KC_API_KEY"
unset KC_API_KEY
export KIMICODE_HOME="${KIMICODE_HOME:-${RUNNER_TEMP:-/tmp}/kimicode-home}"
mkdir -p "$KIMICODE_HOME"

args=(-p "$KC_PROMPT" --output-format json --permission-mode "${KC_PERMISSION_MODE:-default}")
[ -n "${KC_MODEL:-}" ] && args+=(--model "$KC_MODEL")
[ -n "${KC_BASE_URL:-}" ] && args+=(--base-url "$KC_BASE_URL")
[ -n "${KC_MAX_TURNS:-}" ] && args+=(--max-turns "$KC_MAX_TURNS")
[ -n "${KC_MAX_BUDGET_USD:-}" ] && args+=(--max-budget-usd "$KC_MAX_BUDGET_USD")
[ -n "${KC_APPEND_SYSTEM_PROMPT:-}" ] && args+=(--append-system-prompt "$KC_APPEND_SYSTEM_PROMPT")
[ -n "${KC_MCP_CONFIG:-}" ] && args+=(--mcp-config "$KC_MCP_CONFIG")
[ "${KC_TRUST_WORKSPACE:-false}" = "true" ] && args+=(--trust-workspace)
while IFS= read -r rule; do
    [ -n "$rule" ] && args+=(--allow "$rule")
done <<< "${KC_ALLOW:-}"
while IFS= read -r rule; do
    [ -n "$rule" ] && args+=(--deny "$rule")
done <<< "${KC_DENY:-}"

before="$(mktemp)"
result="$(mktemp)"
git status --porcelain=v1 --untracked-files=all 2>/dev/null > "$before" || true
kimicode "${args[@]}" > "$result"
code=$?

python3 - "$result" "$before" "${GITHUB_OUTPUT:-/dev/stdout}" "$KIMICODE_HOME" <<'PY'
import json, os, secrets, subprocess, sys

result_path, before_path, out_path, home = sys.argv[1:5]
try:
    with open(result_path, encoding="utf-8") as fh:
        obj = json.loads(fh.read() or "{}")
except ValueError:
    obj = {}
with open(before_path, encoding="utf-8") as fh:
    before = set(fh.read().splitlines())
try:
    now = subprocess.run(["git", "status", "--porcelain=v1", "--untracked-files=all"], capture_output=True,
                         text=True, check=True).stdout.splitlines()
except (OSError, subprocess.CalledProcessError):
    now = []
changed = sorted({line[3:] for line in now if line not in before})
session = obj.get("session_id") or ""
log = os.path.join(home, "sessions", f"{session}.jsonl") if session else ""
cost = obj.get("cost_usd")
values = {
    "result": obj.get("result") or "",
    "status": obj.get("status") or "error",
    "session-id": session,
    "session-log": log if log and os.path.exists(log) else "",
    "changed-files": "\n".join(changed),
    "cost-usd": "" if cost is None else str(cost),
}
with open(out_path, "a", encoding="utf-8") as fh:
    for name, value in values.items():
        delim = f"KIMICODE_{secrets.token_hex(8)}"  # a random delimiter the answer cannot contain by chance
        fh.write(f"{name}<<{delim}\n{value}\n{delim}\n")
PY
exit "$code"
