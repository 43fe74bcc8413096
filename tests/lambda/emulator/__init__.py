"""Lambda without AWS and without Docker: moto's server whose invocations really execute.

* ``runtime_api.RuntimeAPIServer``: the Lambda Runtime API that awslambdaric talks to.
* ``executor.ProcessExecutor``: one awslambdaric process per invocation, with
  Lambda's environment, timeouts and logs (also used by the LocalStack plugin).
* ``runtime_site.build_runtime_site``: only the packages the AWS Python runtime has.
* ``moto_patch.LambdaExecController``: the hook into moto (``LambdaFunction.invoke``),
  asynchronous ``Event`` invocations, GetAccountSettings.
* ``canary``: fails loudly when moto's internals move under the hook.
* ``server.MotoLambdaServer``: moto's threaded server with all of the above.

    with MotoLambdaServer(str(tmp_path)) as srv:
        lam = srv.client("lambda")
"""

from .canary import ShimIncompatible, check_awslambdaric, check_moto_compat
from .executor import (
    FunctionSpec,
    InvocationResult,
    Placement,
    ProcessExecutor,
    event_of,
)
from .moto_patch import LambdaExecController
from .runtime_site import build_runtime_site
from .server import MOTO_ACCOUNT, MotoLambdaServer

__all__ = [
    "MOTO_ACCOUNT",
    "FunctionSpec",
    "InvocationResult",
    "LambdaExecController",
    "MotoLambdaServer",
    "Placement",
    "ProcessExecutor",
    "ShimIncompatible",
    "build_runtime_site",
    "check_awslambdaric",
    "check_moto_compat",
    "event_of",
]
