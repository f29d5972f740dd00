"""Check results as JUnit XML, the report format CI systems read (one
``<testcase>`` per run; a failed verdict is a ``<failure>``, a run that could
not be replayed an ``<error>``, a run with no command ``<skipped>``). Pure:
values in, bytes out.

The element and attribute names follow the schema most CI servers accept
(Jenkins' junit plugin, GitLab, GitHub actions reporters): ``testsuites`` >
``testsuite`` (name, tests, failures, errors, skipped, time) > ``testcase``
(classname, name, time).
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Callable, Sequence

from wiretape.suite.runner import CheckResult, Status

# XML 1.0 allows tab, newline and carriage return among the control
# characters, nothing else below 0x20 (an agent's output may hold any).
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def _text(value: str) -> str:
    return _NOT_XML.sub("?", value)


def junit_xml(results: Sequence[CheckResult], *, duration_s: float,
              name_of: Callable[[CheckResult], str],
              describe: Callable[[CheckResult], tuple[str, str]]) -> bytes:
    """The JUnit XML document for ``results``. ``name_of`` gives a result's
    test name (its run's path, say); ``describe`` its (message, details) for
    a failure or error. ``duration_s`` is the whole check's time in seconds."""
    failures = sum(1 for r in results if r.status is Status.FAIL)
    errors = sum(1 for r in results if r.status is Status.ERROR)
    skipped = sum(1 for r in results if r.status is Status.SKIP)
    root = ET.Element("testsuites", name="wiretape check", tests=str(len(results)),
                      failures=str(failures), errors=str(errors), time=f"{duration_s:.3f}")
    suite = ET.SubElement(root, "testsuite", name="wiretape check", tests=str(len(results)),
                          failures=str(failures), errors=str(errors), skipped=str(skipped),
                          time=f"{duration_s:.3f}")
    for result in results:
        case = ET.SubElement(suite, "testcase", classname="wiretape.check",
                             name=_text(name_of(result)), time=f"{result.duration_s:.3f}")
        if result.status is Status.PASS:
            continue
        if result.status is Status.SKIP:
            ET.SubElement(case, "skipped", message=_text(result.error or ""))
            continue
        message, details = describe(result)
        tag = "failure" if result.status is Status.FAIL else "error"
        kind = "verdict" if result.status is Status.FAIL else "replay"
        element = ET.SubElement(case, tag, message=_text(message), type=kind)
        element.text = _text(details)
    ET.indent(root)
    document: bytes = ET.tostring(root, encoding="utf-8", xml_declaration=True)
    return document + b"\n"
