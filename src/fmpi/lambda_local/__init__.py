"""A local AWS Lambda endpoint for rehearsal (``fmpi-lambda-local``): moto's API, with invocations that really run.

* ``runtime_api.RuntimeAPIServer``: the Lambda Runtime API that awslambdaric talks to.
* ``executor.ProcessExecutor``: one awslambdaric process per invocation, with
  Lambda's environment, timeouts and logs (also used by the LocalStack plugin
  of the tests), confined by ``sandbox`` as Lambda confines a function.
* ``runtime_site.build_runtime_site``: only the packages the AWS Python runtime has.
* ``moto_patch.LambdaExecController``: the hook into moto (``LambdaFunction.invoke``),
  asynchronous ``Event`` invocations, GetAccountSettings, IAM role propagation.
* ``canary``: fails loudly when moto's internals move under the hook.
* ``server.MotoLambdaServer``: moto's threaded server with all of the above.
* ``cli``: the ``fmpi-lambda-local`` command.

    with MotoLambdaServer(work_dir) as srv:
        lam = srv.client("lambda")

This package's ``__init__`` imports nothing: the LocalStack plugin imports
``runtime_api`` alone, where moto is not installed.
"""
