#!/usr/bin/env bash
# sed-fixer: a deliberately dumb "agent" for the demo suite.
# It greps the task instruction for a keyword and applies one canned `sed`
# edit. It knows three one-line bug fixes; for anything else it gives up
# (exit 1, files untouched), so it scores roughly half the suite.
#
# Two switches turn rule groups off, for the ablation example (ablation.yaml):
#   SED_FIXER_CALC=off  skips the calc.py rules (divide, range_sum)
#   SED_FIXER_TEXT=off  skips the text.py rule (word_count)
set -euo pipefail

calc="${SED_FIXER_CALC:-on}"
text="${SED_FIXER_TEXT:-on}"

instruction="${DELTABENCH_INSTRUCTION:-}"
if [[ -z "$instruction" && -n "${DELTABENCH_INSTRUCTION_FILE:-}" ]]; then
    instruction="$(cat "$DELTABENCH_INSTRUCTION_FILE")"
fi

# fix FILE PATTERN SED_EXPR DESCRIPTION: apply SED_EXPR to FILE if PATTERN is there.
fix() {
    local file="$1" pattern="$2" expr="$3" what="$4"
    if ! grep -q -- "$pattern" "$file"; then
        echo "sed-fixer: expected code not found in $file" >&2
        exit 1
    fi
    sed -i -e "$expr" "$file"
    echo "sed-fixer: $what"
    echo "sed-fixer: edited $file"
}

if [[ "$calc" == on ]] && grep -qi 'divid.*zero' <<<"$instruction"; then
    fix textkit/calc.py 'return 0\.0$' \
        's/return 0\.0$/raise ValueError("cannot divide by zero")/' \
        "divide() now raises ValueError on a zero divisor"
elif [[ "$calc" == on ]] && grep -q 'range_sum' <<<"$instruction"; then
    fix textkit/calc.py 'range(start, end))' \
        's/range(start, end))/range(start, end + 1))/' \
        "range_sum() now includes its end point"
elif [[ "$text" == on ]] && grep -q 'word_count' <<<"$instruction"; then
    fix textkit/text.py 'text\.split(" ")' \
        's/text\.split(" ")/text.split()/' \
        "word_count() now splits on any run of whitespace"
else
    echo "sed-fixer: no rule for this task" >&2
    exit 1
fi
