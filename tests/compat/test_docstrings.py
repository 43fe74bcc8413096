"""Every public name of ``fmpi.MPI`` has a docstring in mpi4py's form, so mpi4py's own test_doc passes.

mpi4py's test_doc.py walks the MPI module, its classes and their functions, methods, static and class methods,
keyed by each object's ``__name__`` (a private alias of a public function counts by its own name), and requires
of every docstring: present and not blank; starting with an uppercase letter (a backtick, quote or parenthesis
counts as lowercase); ending with "."; a one-line summary ending with "."; no trailing blank lines; leading and
trailing whitespace that match. A private name is exempt only if its docstring is empty.

One rule surprises in Python: mpi4py's functions are compiled by Cython, whose docstrings start with an
embedded signature line, so test_doc drops a function's first docstring line before it checks. A function's
text must therefore start on the line after the opening quotes, and, on Python 3.11 (which keeps the
indentation), the closing quotes must close the last line of text::

    def Send(self, buf, dest, tag=0):
        \"\"\"
        Send a buffer to `dest` (blocking).\"\"\"

In a module at its size limit (tests/test_source_size.py) the one-line form is ``\"\"\"\\nSend ....\"\"\"``.
A one-line ``\"\"\"Send ....\"\"\"`` is an *empty* docstring to test_doc. Class docstrings are read whole.

This test repeats test_doc's walk and rules in-process (no fmpirun, no sdist), so it runs in a fraction of a
second; ``cd <mpi4py sdist>/test && fmpirun -n 1 python test_doc.py`` is the same check by mpi4py's code.
"""

from __future__ import annotations

import textwrap
import types

from fmpi import MPI

_CLASS_KINDS = (types.ModuleType, type)
# test_doc's FunctionType, StaticMethodType, ClassMethodType, MethodDescrType and GetSetDescrType, as they are
# for fmpi (plain functions, bound class methods, properties; a property has a __name__ from Python 3.13).
_FUNCTION_KINDS = (types.FunctionType, types.MethodType, property)
_IGNORED = {"py2f", "f2py"}
# Name publishing is being moved out of api/absent.py (its stubs there have no docstrings); once it lives
# elsewhere these are checked like every other name.
_PENDING_ELSEWHERE = {("fmpi.api.absent", name) for name in ("Publish_name", "Unpublish_name", "Lookup_name")}


def _walk(obj: object, found: dict[str, str | None], namespace: str | None = None) -> None:
    """Collect docstrings as mpi4py's test_doc does (``getdocstr``): name -> the text it checks."""
    name = getattr(obj, "__name__", None)
    if name is None or name in ("__builtin__", "builtins"):
        return
    if (getattr(obj, "__module__", None), name) in _PENDING_ELSEWHERE:
        return
    if namespace:
        name = f"{namespace}.{name}"
    if type(obj) in _CLASS_KINDS:
        if obj.__doc__ == "<undocumented>":
            return
        found[name] = obj.__doc__
        for value in list(vars(obj).values()):
            if isinstance(value, (classmethod, staticmethod)):
                value = value.__get__(obj)
            _walk(value, found, name)
    elif type(obj) in _FUNCTION_KINDS:
        doc = obj.__doc__
        if doc == "<undocumented>":
            return
        if doc is not None:
            _, newline, doc = doc.partition("\n")  # (Cython's signature line)
            if newline and doc.startswith("\n"):
                doc = textwrap.dedent(doc[1:])
        found[name] = doc


def _problems(key: str, doc: str | None) -> list[str]:
    """What mpi4py's test_doc says of one docstring (nothing if it passes)."""
    name = key.split(".")[-1]
    if name in _IGNORED or (not doc and name.startswith("_")):
        return []
    if doc is None:
        return [f"{key}: missing docstring"]
    if not doc.strip():
        return [f"{key}: empty docstring (a function's first line is skipped: start the text on the next line)"]
    out = []
    if doc.startswith("\n") != doc.endswith(" "):
        out.append(f"{key}: mismatch start and end whitespace (close the quotes on the last line of text)")
    if doc.replace(" ", "").endswith("\n\n"):
        out.append(f"{key}: docstring ends with too many newlines")
    doc = doc.strip()
    if doc[0] == doc[0].lower():
        out.append(f"{key}: docstring starts with lowercase")
    if not doc.endswith("."):
        out.append(f"{key}: docstring does not end with '.'")
    if not doc.partition("\n")[0].endswith("."):
        out.append(f"{key}: summary line does not end with '.'")
    return out


def _check(obj: object) -> list[str]:
    found: dict[str, str | None] = {}
    _walk(obj, found)
    return [problem for key, doc in found.items() for problem in _problems(key, doc)]


def test_every_public_name_of_mpi_has_a_docstring_in_mpi4pys_form():
    found: dict[str, str | None] = {}
    _walk(MPI, found)
    assert len(found) > 450  # the module, its classes and their methods, not an empty walk
    assert "fmpi.MPI.Comm.Send" in found and "fmpi.MPI.Request.Waitall" in found
    problems = [problem for key, doc in found.items() for problem in _problems(key, doc)]
    assert not problems, "\n".join(problems)


def _module(**names: object) -> types.ModuleType:
    module = types.ModuleType("m", "A module.")
    for key, value in names.items():
        setattr(module, key, value)
    return module


def test_the_check_sees_what_mpi4pys_test_doc_rejects():
    def ok():
        """
        Do it."""

    def compact():
        """\nDo it."""

    def one_line():
        """Do it."""

    def backtick():
        """
        `x` is done."""

    def no_period():
        """
        Do it"""

    def wrapped_summary():
        """
        Do it, and then do
        more."""

    def closing_quotes_alone():
        """
        Do it.
        """

    def undocumented():
        pass

    def _private_one_line():
        """Private, one line: exempt."""

    class Undocumented:
        pass

    Undocumented.method = ok

    assert _check(_module(ok=ok, compact=compact, _private_one_line=_private_one_line)) == []
    assert _check(_module(closing_quotes_alone=closing_quotes_alone)) == (
        [] if not closing_quotes_alone.__doc__.endswith(" ") else  # (Python 3.13 strips the indentation)
        ["m.closing_quotes_alone: mismatch start and end whitespace (close the quotes on the last line of text)"])
    assert _check(_module(one_line=one_line)) == [
        "m.one_line: empty docstring (a function's first line is skipped: start the text on the next line)"]
    assert _check(_module(backtick=backtick)) == ["m.backtick: docstring starts with lowercase"]
    assert _check(_module(no_period=no_period)) == [
        "m.no_period: docstring does not end with '.'", "m.no_period: summary line does not end with '.'"]
    assert _check(_module(wrapped_summary=wrapped_summary)) == ["m.wrapped_summary: summary line does not end with '.'"]
    assert _check(_module(undocumented=undocumented)) == ["m.undocumented: missing docstring"]
    assert _check(_module(Undocumented=Undocumented)) == ["m.Undocumented: missing docstring"]
