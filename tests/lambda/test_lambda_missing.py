"""The invocations a world that did not fill waited for (``lambda_backend.missing``), against a fake CloudWatch Logs.

End to end (a dropped invocation named with the request id the emulator
answered) is in test_lambda_faults.py.
"""

from __future__ import annotations

import json

from botocore.exceptions import ClientError

from fmpi.launcher.lambda_backend.missing import describe, log_streams


class FakeLogs:
    """filter_log_events over a list of (stream, message), two events a page."""

    def __init__(self, events: list[tuple[str, str]], fail: bool = False) -> None:
        self.events, self.fail, self.calls = events, fail, []

    def filter_log_events(self, **request):
        self.calls.append(request)
        if self.fail:
            raise ClientError({"Error": {"Code": "AccessDeniedException", "Message": "no"}}, "FilterLogEvents")
        start = int(request.get("nextToken", 0))
        terms = [t.lstrip("?") for t in request["filterPattern"].split()]  # ("?a ?b": a or b)
        page = [{"logStreamName": s, "message": m} for s, m in self.events[start:start + 2] if any(t in m for t in terms)]
        more = {"nextToken": str(start + 2)} if start + 2 < len(self.events) else {}
        return {"events": page, **more}


def _requests(*rows: tuple[str, int, int, str | None]) -> dict[str, dict]:
    return {inc: {"rank": rank, "last": last, "request_id": rid} for inc, rank, last, rid in rows}


def test_a_started_invocation_is_named_with_its_log_stream_and_one_never_started_without():
    logs = FakeLogs([
        ("2026/11/27/[1]aaa", "START RequestId: id-0 Version: 1"),
        ("2026/11/27/[1]bbb", "START RequestId: id-2 Version: 1"),
        ("2026/11/27/[1]bbb", "something else"),
        ("2026/11/27/[1]ccc", json.dumps({"type": "platform.start", "record": {"requestId": "id-s"}})),
    ])
    requests = _requests(("i0", 0, 0, "id-0"), ("i1", 1, 1, "id-1"), ("i2", 2, 2, "id-2"), ("s", -1, -1, "id-s"))
    warned: list[str] = []
    text = describe(requests, {"i0"}, [1, 2], logs, "fn", 0, warned.append)
    assert text == (
        ". Invocations that never joined: "
        "rank 1: request id id-1, no START line in the log yet: Lambda may never have started it; "
        "rank 2: request id id-2, log stream 2026/11/27/[1]bbb; "
        "a spare: request id id-s, log stream 2026/11/27/[1]ccc"
    )
    assert not warned and {c["logGroupName"] for c in logs.calls} == {"/aws/lambda/fn"}


def test_ranks_below_a_head_that_joined_are_named_with_the_head_whose_log_holds_their_ids():
    requests = _requests(("h0", 0, 7, "id-h0"), ("h8", 8, 15, "id-h8"))
    text = describe(requests, {"h0"}, [5, 6, 8, 9, 10, 11, 12, 13, 14, 15], FakeLogs([]), "fn", 0, lambda _: None)
    assert "rank 8 (heading ranks 8-15): request id id-h8" in text
    assert "Ranks 5-6 were invoked by rank 0 (request id id-h0), whose log names their request ids" in text
    assert "invoked by rank 8" not in text  # (its block is missing because it is)


def test_without_permission_to_read_the_log_the_ids_are_still_named():
    warned: list[str] = []
    text = describe(_requests(("i1", 1, 1, "id-1")), set(), [1], FakeLogs([], fail=True), "fn", 0, warned.append)
    assert "rank 1: request id id-1" in text
    assert len(warned) == 1 and "without their log streams" in warned[0]
    assert describe(_requests(("i1", 1, 1, "id-1")), {"i1"}, [], FakeLogs([]), "fn", 0, warned.append) == ""
    assert log_streams(FakeLogs([]), "fn", 0, set(), warned.append) == {}
