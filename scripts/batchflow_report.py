"""Summarizes a junit report of batchflow's test files run on flowpipe: passed/failed per file and in total.

``python batchflow_report.py REPORT.xml "config dataset ..." [-v]``. The reference counts are the tests each file
collects, all passing, on batchflow 0.10.1 itself; a file that cannot be imported counts all its tests as failed.
"""
import sys
import xml.etree.ElementTree as ET

REFERENCE = {'config': 17, 'config_basic': 15, 'dataset': 13, 'datasetindex': 9, 'common_index': 68,
             'filesindex': 13, 'named_expr': 56, 'rebatch': 14, 'save_to': 3}


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


if __name__ == '__main__':
    main(*sys.argv[1:])
