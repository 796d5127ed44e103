"""Reads checkov's JSON report (argv[1]; stderr in argv[2]) and judges it: no failed check,
no parsing error, at least one check run, and every suppression carries a written reason.
Prints the failures and a closing `checkov: N passed, M failed` (the checkov run is one
test, whatever its number of checks)."""

import json
import sys


def main() -> int:
    problems = []
    try:
        with open(sys.argv[1], encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError) as e:
        with open(sys.argv[2], encoding="utf-8") as f:
            err = f.read()[-3000:]
        problems.append(f"checkov produced no report ({e}):\n{err}")
        data = []
    reports = data if isinstance(data, list) else [data]
    passed = failed = skipped = 0
    for r in reports:
        summary = r.get("summary", {})
        passed += summary.get("passed", 0)
        failed += summary.get("failed", 0)
        skipped += summary.get("skipped", 0)
        if summary.get("parsing_errors", 0):
            problems.append(f"{summary['parsing_errors']} file(s) did not parse")
        results = r.get("results", {})
        for c in results.get("failed_checks", []):
            problems.append(
                f"{c['check_id']} {c['check_name']}: {c['resource']} ({c['file_path']}:{c['file_line_range'][0]})"
            )
        for c in results.get("skipped_checks", []):
            reason = (c.get("suppress_comment") or "").strip()
            if not reason or reason == "No comment provided":
                problems.append(f"{c['check_id']} suppressed without a reason: {c['resource']}")
    if reports and passed == 0:
        problems.append("checkov ran no check")
    for p in problems:
        print(f"  FAIL  {p}")
    print(f"  checkov: {passed} checks passed, {failed} failed, {skipped} suppressed inline with a reason")
    ok = not problems
    print(f"checkov: {1 if ok else 0} passed, {0 if ok else 1} failed")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
