#!/usr/bin/env bash
# The docs say what the code does: each tutorial page shows its test file verbatim (one
# ```cpp block holding the whole file), and docs/api/ is what docs/api/make_api_pages.py
# makes from the public headers today. Arguments: the public headers.
set -euo pipefail

status=0
check_shows() {  # PAGE FILE
  if ! /usr/bin/python3 - "$1" "$2" <<'PY'
import sys
page, source = (open(p).read() for p in sys.argv[1:3])
sys.exit(0 if f"```cpp\n{source}```\n" in page else 1)
PY
  then
    echo "FAIL: $1 does not show $2 verbatim (copy the file into its \`\`\`cpp block)" >&2
    status=1
  fi
}
check_shows docs/tutorials/fusion_pattern.md tests/docs/fusion_pattern_tutorial_test.cc
check_shows docs/tutorials/lowering_rule.md tests/docs/lowering_rule_tutorial_test.cc

/usr/bin/python3 docs/api/make_api_pages.py --check "$@" || status=1
[[ $status -eq 0 ]] && echo "docs_in_sync_test: PASSED"
exit $status
