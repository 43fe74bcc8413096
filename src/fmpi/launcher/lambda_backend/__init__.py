"""The AWS Lambda backend: N ranks as N concurrent invocations of one function.

Launcher side (``fmpirun --backend lambda|localstack``):

* ``packaging``: the deployment zip (fmpi, its dependencies, the program's
  directory), built deterministically and cached by content hash;
* ``aws``: boto3 sessions for the two backends, and AWS errors turned into
  messages that name the cause;
* ``deploy``: create or update the function, wait until it is active, turn
  async retries off, check the account's concurrency headroom;
* ``s3code``: the function's code in the API call, or, for a zip over
  Lambda's 50 MB direct-upload limit, uploaded once per content to S3;
* ``fanout``: invoke the ranks (``InvocationType=Event``) from a thread pool,
  or through an invocation tree for large N;
* ``launch``: the whole job: deploy, relay, fan out, progress, supervise.

Function side:

* ``event``: the rank event (a ``RankSpec`` plus the program and the
  deadline), built by the launcher and validated by the handler;
* ``handler``: the function's entry point: join, run the program as
  ``__main__``, forward its output, report;
* ``output``: stdout/stderr streams that forward to the launcher through the relay.

This package's ``__init__`` imports nothing: the handler must load fast.
"""
