"""Counts PgBouncer's suite results against pgfleet by scope (issue 35, item 6).

usage: summary.py results.xml scope.txt

scope.txt lists the tests that are out of scope, as `file.py::test_name` patterns (fnmatch)
followed by the reason; every other test is in scope. Exit status 1 when an in-scope test did not
pass (skips by the suite itself, such as tests needing sudo or LDAP, are counted apart).
"""
import collections
import fnmatch
import sys
import xml.etree.ElementTree as ET


def read_scope(path):
    rules = []
    for line in open(path, encoding="utf-8"):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        pattern, _, reason = line.partition(" ")
        rules.append((pattern, reason.strip()))
    return rules


def outcome_of(case):
    for child in case:
        if child.tag in ("failure", "error"):
            return "failed"
        if child.tag == "skipped":
            return "skipped"
    return "passed"


def main():
    results, scope = sys.argv[1], sys.argv[2]
    rules = read_scope(scope)
    counts = collections.Counter()
    out_of_scope = collections.defaultdict(collections.Counter)
    failed = []
    for case in ET.parse(results).getroot().iter("testcase"):
        module = case.get("classname", "").split(".")[-1]
        name = f"{module}.py::{case.get('name')}"
        outcome = outcome_of(case)
        reason = next((r for p, r in rules if fnmatch.fnmatch(name, p)), None)
        if reason is not None:
            out_of_scope[reason][outcome] += 1
            counts[f"out of scope, {outcome}"] += 1
            continue
        counts[f"in scope, {outcome}"] += 1
        if outcome == "failed":
            failed.append(name)
    total = sum(counts.values())
    print(f"PgBouncer 1.25 test suite against pgfleet: {total} tests")
    for key in sorted(counts):
        print(f"  {key}: {counts[key]}")
    print("out of scope, by reason:")
    for reason, outcomes in sorted(out_of_scope.items()):
        print(f"  {sum(outcomes.values()):3d}  {reason}")
    if failed:
        print("in-scope tests that failed:")
        for name in failed:
            print(f"  {name}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
