#!/usr/bin/env bash
# Re-make the README's terminal captures of `phi race` (docs/captures/race-{80,160}-*.txt): runs the
# race in a detached tmux pane of the given width and saves three frames — the branches streaming
# (one done while others still run or queue), the judging line, and the final verdict.
#   bash docs/captures/capture_race.sh            # both widths, the embedded model (no key)
# Needs tmux and the `local` extra; PHI_HOME is a temporary directory so nothing is logged for you.
set -euo pipefail
cd "$(dirname "$0")"
prompt="Why is the sky blue?"
home=$(mktemp -d)
trap 'rm -rf "$home"' EXIT
for width in 80 160; do
    session="phi-capture-$$-$width"
    tmux new-session -d -s "$session" -x "$width" -y 60 \
        "PHI_HOME=$home phi race --max-tokens 60 --strategy judge --no-log '$prompt'; echo \"[exit \$?]\"; sleep 600"
    got_branches="" got_judging=""
    for _ in $(seq 1 1200); do  # at most 5 minutes
        frame=$(tmux capture-pane -p -t "$session")
        if [ -z "$got_branches" ] && grep -q "done ·" <<<"$frame" && grep -Eq "(running|queued) ·" <<<"$frame"; then
            printf '%s\n' "$frame" >"race-$width-branches.txt"
            got_branches=1
        fi
        if [ -z "$got_judging" ] && grep -q "^judging" <<<"$frame"; then
            printf '%s\n' "$frame" >"race-$width-judging.txt"
            got_judging=1
        fi
        if grep -q "^\[exit" <<<"$frame"; then
            # the whole run, scrollback included, without the pane's empty bottom lines
            tmux capture-pane -p -S - -t "$session" \
                | awk 'NF { last = NR } { line[NR] = $0 } END { for (i = 1; i <= last; i++) print line[i] }' \
                >"race-$width-final.txt"
            break
        fi
        sleep 0.25
    done
    tmux kill-session -t "$session"
    [ -n "$got_branches" ] && [ -n "$got_judging" ] || echo "width $width: a frame was missed" >&2
done
