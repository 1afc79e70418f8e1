"""Summarizes batchflow's test files and tutorial notebooks run on flowpipe.

``python batchflow_report.py REPORT.xml "config dataset ..." [-v]``: passed/failed per test file and in total. The
reference counts are the tests each file collects, all passing, on batchflow 0.10.1 itself; a file that cannot be
imported counts all its tests as failed.

``python batchflow_report.py --notebooks RESULTS.json REFERENCE.json``: per notebook, the code cells that run on
flowpipe and on batchflow, and the cells that run on batchflow but not on flowpipe, with flowpipe's error.
"""
import json
import sys
import xml.etree.ElementTree as ET

REFERENCE = {'config': 17, 'config_basic': 15, 'dataset': 13, 'datasetindex': 9, 'common_index': 68,
             'filesindex': 13, 'named_expr': 56, 'rebatch': 14, 'save_to': 3, 'research': 155}


def _file_of(case: ET.Element) -> str:
    name = case.get('classname') or case.get('name', '')
    return name.split('.')[0].removesuffix('_test')


def main(report: str, files: str, verbose: str = '') -> None:
    passed = {name: 0 for name in files.split()}
    failures = {name: [] for name in passed}
    for case in ET.parse(report).getroot().iter('testcase'):
        problem = case.find('failure')
        if problem is None:
            problem = case.find('error')
        name = _file_of(case)
        if problem is None and case.find('skipped') is None:
            passed[name] += 1
        elif problem is not None:
            message = (problem.get('message') or '').splitlines()
            failures[name].append(f"{case.get('name')}: {message[0] if message else ''}")
    total = sum(REFERENCE[name] for name in passed)
    print(f"{'file':<14}{'passed':>8}{'failed':>8}")
    for name, count in passed.items():
        print(f'{name:<14}{count:>8}{REFERENCE[name] - count:>8}')
        if verbose == '-v':
            for line in failures[name]:
                print(f'    {line}')
    done = sum(passed.values())
    print(f"{'total':<14}{done:>8}{total - done:>8}   {done}/{total} = {100 * done / total:.1f} % "
          f'of batchflow 0.10.1 core tests pass on flowpipe')


def notebooks(results_file: str, reference_file: str) -> None:
    results, reference = json.load(open(results_file)), json.load(open(reference_file))
    print(f"{'notebook':<30}{'cells':>6}{'flowpipe':>10}{'batchflow':>11}{'both':>6}")
    for name, cells in results.items():
        ran = {int(cell) for cell, outcome in cells.items() if outcome == 'ok'}
        theirs = set(reference[name]['ok'])
        print(f'{name:<30}{len(cells):>6}{len(ran):>10}{len(theirs):>11}{len(ran & theirs):>6}')
        for cell in sorted(theirs - ran):
            print(f'    cell {cell} runs on batchflow only: {cells[str(cell)]}')


if __name__ == '__main__':
    if sys.argv[1] == '--notebooks':
        notebooks(*sys.argv[2:])
    else:
        main(*sys.argv[1:])
