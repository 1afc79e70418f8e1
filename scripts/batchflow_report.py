"""Summarizes batchflow's test files and tutorial notebooks run on flowpipe.

``python batchflow_report.py REPORT.xml REFERENCE.json "config dataset ..." [-v]``: per test file, how many of the
tests batchflow 0.10.1 itself passes on this machine (their ids: ``REFERENCE.json``, made with
``--reference``) pass on flowpipe, then the total. A test flowpipe does not collect (its file does not import)
counts as failed. ``-v`` also lists, per file, each reason of failure (the first line of flowpipe's error) with
how many tests it fails and a few of their names.

``python batchflow_report.py --reference OUT.json REPORT.xml...``: writes into ``OUT.json`` the ids of the tests
that pass in the reports (runs on batchflow itself), per file; the files of ``OUT.json`` not in the reports stay.

``python batchflow_report.py --notebooks RESULTS.json REFERENCE.json``: per notebook, the code cells that run on
flowpipe and on batchflow, and the cells that run on batchflow but not on flowpipe, with flowpipe's error.
"""
import collections
import json
import sys
import xml.etree.ElementTree as ET

SHOWN = 3   # test names shown per reason of failure
HOW = ('The tests of batchflow 0.10.1\'s test files that pass on batchflow itself, per file: made by '
       '`bash scripts/batchflow_compat.sh --reference VENV` (VENV: batchflow==0.10.1 with its nn, image, dev and '
       'research extras); docs/porting.md says on which machine.')


def _file_and_id(case: ET.Element) -> tuple[str, str]:
    """``('metrics', 'TestX::test_y[a-b]')`` for a junit test case of ``metrics_test.py``."""
    module, _, cls = (case.get('classname') or '').partition('.')
    name = case.get('name', '')
    if not module:                                      # a file that could not be collected
        return name.removesuffix('_test'), ''
    return module.removesuffix('_test'), f"{cls.replace('.', '::')}::{name}" if cls else name


def _reason(problem: ET.Element) -> str:
    """The first line of the error; for a file that does not import, the exception line of its traceback."""
    message = (problem.get('message') or '').strip()
    if message == 'collection failure' or not message:
        errors = [line[1:].strip() for line in (problem.text or '').splitlines() if line.startswith('E ')]
        message = errors[-1] if errors else message
    return message.splitlines()[0] if message else 'no message'


def _outcomes(report: str) -> tuple[dict, dict]:
    """{file: {test id: None if passed else its reason}}, {file: reason it was not collected}."""
    outcomes, broken = collections.defaultdict(dict), {}
    for case in ET.parse(report).getroot().iter('testcase'):
        name, test = _file_and_id(case)
        problem = case.find('failure')
        problem = case.find('error') if problem is None else problem
        skipped = case.find('skipped')
        if not test:
            broken[name] = _reason(problem) if problem is not None else 'not collected'
        elif problem is not None:
            outcomes[name][test] = _reason(problem)
        elif skipped is not None:
            outcomes[name][test] = f"skipped: {skipped.get('message') or ''}"
        else:
            outcomes[name][test] = None
    return outcomes, broken


def reference(out: str, *reports: str) -> None:
    """Writes (or updates, file by file) the ids of the tests that pass in the ``reports``."""
    try:
        passing = json.load(open(out))['passed']
    except FileNotFoundError:
        passing = {}
    for report in reports:
        outcomes, broken = _outcomes(report)
        passing.update({name: sorted(test for test, reason in outcomes[name].items() if reason is None)
                        for name in {*outcomes, *broken}})
    with open(out, 'w') as file:
        json.dump({'_how': HOW, 'passed': dict(sorted(passing.items()))}, file, indent=1)
        file.write('\n')


def _file_line(name: str, tests: list[str], outcomes: dict, broken: dict, verbose: bool) -> int:
    """Prints one file's line (and, ``verbose``, its reasons of failure); returns how many of ``tests`` pass."""
    reasons = collections.defaultdict(list)
    for test in tests:
        outcome = outcomes[name].get(test, f"not collected: {broken.get(name, 'no such test')}")
        if outcome is not None:
            reasons[outcome].append(test)
    ours = len(tests) - sum(map(len, reasons.values()))
    print(f'{name:<20}{ours:>8}{len(tests):>7}' + (f'{100 * ours / len(tests):>8.1f}%' if tests else ''))
    if verbose:
        for reason, failed in sorted(reasons.items(), key=lambda pair: -len(pair[1])):
            more = f' (+{len(failed) - SHOWN})' if len(failed) > SHOWN else ''
            print(f"    {len(failed)} x {reason}\n        {', '.join(failed[:SHOWN])}{more}")
    return ours


def main(report: str, reference_file: str, files: str, verbose: str = '') -> None:
    """``files``: names of test files (``metrics`` for ``metrics_test.py``); ``group:`` before some starts a group,
    which gets its own total line."""
    passing = json.load(open(reference_file))['passed']
    outcomes, broken = _outcomes(report)
    print(f"{'file':<20}{'passed':>8}{'of':>7}{'%':>9}")
    totals = {}                         # {group: [passed, of]}
    group = ''
    for name in files.split():
        if name.endswith(':'):
            group = name[:-1]
            continue
        counts = totals.setdefault(group, [0, 0])
        counts[0] += _file_line(name, passing.get(name, []), outcomes, broken, verbose == '-v')
        counts[1] += len(passing.get(name, []))
    lines = [(f'{group} total', *counts) for group, counts in totals.items() if group and len(totals) > 1]
    done, total = sum(counts[0] for counts in totals.values()), sum(counts[1] for counts in totals.values())
    for label, ours, theirs in [*lines, ('total', done, total)]:
        print(f'{label:<20}{ours:>8}{theirs:>7}{100 * ours / theirs:>8.1f}%')
    print(f'{done} of the {total} tests of these files that batchflow 0.10.1 passes on this machine pass on flowpipe')


def notebooks(results_file: str, reference_file: str) -> None:
    results, reference_cells = json.load(open(results_file)), json.load(open(reference_file))
    print(f"{'notebook':<30}{'cells':>6}{'flowpipe':>10}{'batchflow':>11}{'both':>6}")
    for name, cells in results.items():
        ran = {int(cell) for cell, outcome in cells.items() if outcome == 'ok'}
        theirs = set(reference_cells[name]['ok'])
        print(f'{name:<30}{len(cells):>6}{len(ran):>10}{len(theirs):>11}{len(ran & theirs):>6}')
        for cell in sorted(theirs - ran):
            print(f'    cell {cell} runs on batchflow only: {cells[str(cell)]}')


if __name__ == '__main__':
    if sys.argv[1] == '--notebooks':
        notebooks(*sys.argv[2:])
    elif sys.argv[1] == '--reference':
        reference(*sys.argv[2:])
    else:
        main(*sys.argv[1:])
