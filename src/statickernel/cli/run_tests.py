"""`statickernel test`: each kernel with a reference run against it at its probe cases, as a
table, as JSON (`--json`) and as JUnit XML (`--junit-xml`)."""

import argparse
import fnmatch
import pathlib
import time
from collections.abc import Sequence
from typing import Any

import jax.numpy as jnp

from .. import testing
from ..runtime.backend import default_backend
from ..testing.junit import ImportFailure, KernelResults, write_junit
from .args import DTYPE_ALIASES, UsageError
from .commands import (
    EXIT_FAILED,
    EXIT_OK,
    collect,
    import_failure_facts,
    print_import_failure,
    style_of,
)
from .discover import FoundKernel
from .json_output import to_json
from .output import plural, print_json, progress

__all__ = ["cmd_test", "result_facts", "selected"]

_GLOB = frozenset("*?[")


def selected(name: str, patterns: Sequence[str]) -> bool:
    """`-k`: whether a kernel's name contains a pattern, or matches it as a glob; any case."""
    if not patterns:
        return True
    name = name.lower()
    for pattern in (p.lower() for p in patterns):
        if _GLOB & set(pattern):
            if fnmatch.fnmatchcase(name, pattern):
                return True
        elif pattern in name:
            return True
    return False


def cmd_test(args: argparse.Namespace) -> int:
    style = style_of(args)
    quiet = args.json
    found, failed_imports = collect(args.targets)
    if not quiet:
        for module in failed_imports:
            print_import_failure(module, args.traceback, style)
    chosen = [f for f in found if selected(f.name, args.select)]
    skipped: list[dict[str, str]] = []
    runs = _runs(chosen, _dtype_names(args.dtype), skipped, quiet)
    backend = args.backend or default_backend()
    done: list[KernelResults] = []
    start = time.perf_counter()
    for index, (f, dtypes) in enumerate(runs, 1):
        results = _test_kernel(f, dtypes, f"[{index}/{len(runs)}]", args, backend)
        done.append(KernelResults(f.location, tuple(results)))
        if args.exitfirst and not all(r.passed for r in results):
            break
    seconds = time.perf_counter() - start
    results = [r for k in done for r in k.results]
    bad = sum(not r.passed for r in results)
    nothing = not runs and not failed_imports
    ok = not nothing and bad == 0 and not failed_imports
    if args.junit_xml:
        failures = [
            ImportFailure(m.source, facts["kind"], facts["error"]["message"])
            for m, facts in ((m, import_failure_facts(m)) for m in failed_imports)
        ]
        write_junit(pathlib.Path(args.junit_xml), done, failures, seconds)
    if quiet:
        cases = [result_facts(r, k.location) for k in done for r in k.results]
        totals = {
            "kernels": len(done),
            "cases": len(results),
            "passed": len(results) - bad,
            "failed": bad,
            "import_failures": len(failed_imports),
            "seconds": round(seconds, 3),
        }
        document = {
            "command": "test",
            "ok": ok,
            "backend": backend,
            "seed": args.seed,
            "cases": cases,
            "skipped": skipped,
            "import_failures": [import_failure_facts(m) for m in failed_imports],
            "totals": totals,
        }
        print_json(document)
        return EXIT_OK if ok else EXIT_FAILED
    if results:
        print(style.table(testing.format_results(results)))
    stopped = f"; stopped after {plural(len(done), 'kernel')} (-x)" if len(done) < len(runs) else ""
    print(
        style.marks(
            f"{len(results) - bad} ✓, {bad} ✗ ({plural(len(results), 'case')} of "
            f"{plural(len(done), 'kernel')}, {seconds:.1f} s){stopped}"
        )
    )
    if failed_imports:
        count = plural(len(failed_imports), "module")
        print(style.marks(f"✗ {count} failed to import (shown above)"))
    if nothing:
        print("nothing to test: no kernel with a reference was found")
    return EXIT_OK if ok else EXIT_FAILED


def result_facts(result: testing.CheckResult, location: str) -> dict[str, Any]:
    """One case for --json: the result's fields, its location, whether it passed and, for a
    failure, the report `format_results` prints."""
    facts: dict[str, Any] = {"location": location, **to_json(result), "passed": result.passed}
    if facts["worst"] is not None and result.worst is not None:
        facts["worst"]["relative_error"] = to_json(result.worst.relative_error)
    facts["coverage"] = to_json(result.coverage)
    facts["report"] = testing.describe_failure(result) or None
    return facts


def _dtype_names(texts: Sequence[str]) -> list[str]:
    names = []
    for text in texts:
        try:
            names.append(jnp.dtype(DTYPE_ALIASES.get(text, text)).name)
        except TypeError:
            raise UsageError(
                f"--dtype {text!r} is not a dtype; use e.g. float32, bfloat16 or float16"
            ) from None
    return names


def _runs(
    found: Sequence[FoundKernel],
    dtypes: Sequence[str],
    skipped: list[dict[str, str]],
    quiet: bool,
) -> list[tuple[FoundKernel, list[str] | None]]:
    """Each kernel to test with the --dtype values it allows (None: the default dtypes);
    kernels with no reference, or allowing none of the --dtype values, are skipped."""
    runs: list[tuple[FoundKernel, list[str] | None]] = []

    def skip(f: FoundKernel, reason: str) -> None:
        skipped.append({"name": f.name, "location": f.location, "reason": reason})
        if not quiet:
            print(f"- {f.location}  {f.name}: {reason}, skipped", flush=True)

    for f in found:
        if f.kernel.reference is None:
            skip(f, "no reference declared")
            continue
        allowed = {d for o in f.kernel.spec.operands for d in o.dtypes}
        wanted = [d for d in dtypes if d in allowed]
        if dtypes and not wanted:
            skip(f, f"allows none of {', '.join(dtypes)}")
            continue
        runs.append((f, wanted or None))
    if dtypes and not runs and any(f.kernel.reference is not None for f in found):
        raise UsageError(f"--dtype: no kernel found allows {', '.join(dtypes)}")
    return runs


def _test_kernel(
    found: FoundKernel,
    dtypes: list[str] | None,
    counter: str,
    args: argparse.Namespace,
    backend: str,
) -> list[testing.CheckResult]:
    cases = len(testing.probe_cases(found.kernel, dtypes=dtypes))
    progress(f"{counter} {found.name} ({found.location}): {plural(cases, 'case')} ")
    start = time.perf_counter()

    def report(result: testing.CheckResult) -> None:
        progress("." if result.passed else "F")

    results = testing.run_checks(
        found.kernel,
        dtypes=dtypes,
        backend=backend,
        seed=args.seed,
        rtol=args.rtol,
        atol=args.atol,
        on_result=report,
    )
    progress(f" {time.perf_counter() - start:.1f} s\n")
    return results
