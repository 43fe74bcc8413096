import os
from concurrent.futures import ThreadPoolExecutor

from localstack.services.lambda_.invocation.plugins import RuntimeExecutorPlugin

# LocalStack 4.13.1 runs a function's asynchronous (Event) invocations on a
# ThreadPoolExecutor of default size, min(32, cores + 4): 6 on a 2-core machine.
# An fmpi job needs all its ranks running at once, which AWS allows up to the
# account's concurrency; so widen the pool (a TODO in LocalStack's own code).
ASYNC_WORKERS = int(os.environ.get("FMPI_LS_ASYNC_WORKERS", "64"))


def _widen_async_invoker_pool() -> None:
    from localstack.services.lambda_.invocation import event_manager

    if getattr(event_manager.Poller, "_fmpi_widened", False):
        return
    original = event_manager.Poller.__init__

    def __init__(self, *args, **kwargs):
        original(self, *args, **kwargs)
        prefix = self.invoker_pool._thread_name_prefix
        self.invoker_pool.shutdown(wait=False)
        self.invoker_pool = ThreadPoolExecutor(max_workers=ASYNC_WORKERS, thread_name_prefix=prefix)

    event_manager.Poller.__init__ = __init__
    event_manager.Poller._fmpi_widened = True


class ProcessRuntimeExecutorPlugin(RuntimeExecutorPlugin):
    """Selected with LAMBDA_RUNTIME_EXECUTOR=fmpi-process."""

    name = "fmpi-process"

    def load(self, *args, **kwargs):
        from fmpi_ls_executor.executor import ProcessRuntimeExecutor

        _widen_async_invoker_pool()
        return ProcessRuntimeExecutor
