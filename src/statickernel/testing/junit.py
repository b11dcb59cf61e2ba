"""`statickernel test --junit-xml`: the results as a JUnit XML report, which CI systems show
as test results: one testcase per case, a failure carrying the mismatch report, an error for
a case that raised or a module that failed to import."""

import dataclasses
import pathlib
import xml.etree.ElementTree as ET
from collections.abc import Sequence

from .probes import ProbeCase
from .results import CheckResult, describe_failure
from .suites import case_id

__all__ = ["ImportFailure", "KernelResults", "write_junit"]


@dataclasses.dataclass(frozen=True)
class KernelResults:
    """One kernel's cases; `location` (path:line of its declaration) is their classname."""

    location: str
    results: tuple[CheckResult, ...]


@dataclasses.dataclass(frozen=True)
class ImportFailure:
    """A module that failed to import: one testcase with an error."""

    source: str
    kind: str  # "import failed" or "declaration error"
    message: str


def write_junit(
    path: pathlib.Path,
    kernels: Sequence[KernelResults],
    import_failures: Sequence[ImportFailure],
    seconds: float,
) -> None:
    cases = [r for k in kernels for r in k.results]
    failures = sum(r.error is None and not r.passed for r in cases)
    errors = sum(r.error is not None for r in cases) + len(import_failures)
    suite = ET.Element(
        "testsuite",
        name="statickernel",
        tests=str(len(cases) + len(import_failures)),
        failures=str(failures),
        errors=str(errors),
        skipped="0",
        time=f"{seconds:.3f}",
    )
    for kernel in kernels:
        for result in kernel.results:
            case_name = case_id(ProbeCase(result.probe, result.shapes, result.dtypes))
            name = f"{result.kernel}[{case_name}]"
            case = ET.SubElement(
                suite,
                "testcase",
                classname=kernel.location,
                name=name,
                time=f"{result.seconds:.3f}",
            )
            if result.passed:
                continue
            report = describe_failure(result)
            kind = "error" if result.error is not None else "failure"
            first = report.splitlines()[0] if report else kind
            ET.SubElement(case, kind, message=first, type=kind).text = report
    for failure in import_failures:
        case = ET.SubElement(suite, "testcase", classname=failure.source, name="import", time="0")
        text = f"{failure.kind}: {failure.message}"
        ET.SubElement(case, "error", message=text.splitlines()[0], type="error").text = text
    root = ET.Element("testsuites")
    root.append(suite)
    ET.indent(root)
    path.parent.mkdir(parents=True, exist_ok=True)
    ET.ElementTree(root).write(path, encoding="utf-8", xml_declaration=True)
