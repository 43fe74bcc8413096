"""moto's server, in-process, with Lambda invocations that really run (a pytest fixture's engine)."""

from __future__ import annotations

import logging
import sys
import urllib.request
from collections.abc import Callable

from .executor import FunctionSpec, Placement, ProcessExecutor
from .moto_patch import LambdaExecController

MOTO_ACCOUNT = "123456789012"


class MotoLambdaServer:
    def __init__(
        self,
        work_dir: str,
        python: str = sys.executable,
        runtime_site: str | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        concurrency_limit: int = 1000,
        retry_delay_s: float = 1.0,
        extra_env: dict[str, str] | None = None,
        placement: Callable[[FunctionSpec, bytes], Placement] | None = None,
        role_propagation_s: float = 0.0,
    ) -> None:
        self.work_dir, self.host, self.port = work_dir, host, port
        self.executor = ProcessExecutor(work_dir, python=python, runtime_site=runtime_site,
                                        extra_env=extra_env, placement=placement)
        self.ctrl = LambdaExecController(self.executor, concurrency_limit=concurrency_limit,
                                         retry_delay_s=retry_delay_s, role_propagation_s=role_propagation_s)
        self._server = None
        self.endpoint_url: str | None = None

    def start(self) -> MotoLambdaServer:
        from moto.server import ThreadedMotoServer

        logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no access log per request
        self.ctrl.install()  # before the first Lambda request: moto caches its Flask app
        self._server = ThreadedMotoServer(ip_address=self.host, port=self.port, verbose=False)
        self._server.start()
        host, port = self._server.get_host_and_port()
        self.endpoint_url = f"http://{host}:{port}"
        self.executor.endpoint_url = self.endpoint_url  # AWS_ENDPOINT_URL inside handlers
        return self

    def reset(self) -> None:
        """Drop all moto state (functions, roles, logs)."""
        req = urllib.request.Request(self.endpoint_url + "/moto-api/reset", method="POST")
        urllib.request.urlopen(req, timeout=10).read()

    def client(self, service: str = "lambda", **kw):
        import boto3

        return boto3.client(service, endpoint_url=self.endpoint_url, region_name="us-east-1",
                            aws_access_key_id="testing", aws_secret_access_key="testing", **kw)

    def create_role(self, name: str = "fmpi-lambda-role", age_s: float = 0.0) -> str:
        """moto's CreateFunction requires the role to exist in moto's IAM (same account). `age_s`: made as if
        created that long ago (past the emulated IAM propagation)."""
        trust = ('{"Version":"2012-10-17","Statement":[{"Effect":"Allow",'
                 '"Principal":{"Service":"lambda.amazonaws.com"},"Action":"sts:AssumeRole"}]}')
        iam = self.client("iam")
        try:
            arn = iam.create_role(RoleName=name, AssumeRolePolicyDocument=trust)["Role"]["Arn"]
        except iam.exceptions.EntityAlreadyExistsException:
            return iam.get_role(RoleName=name)["Role"]["Arn"]
        if age_s:
            import datetime

            from moto.iam.models import iam_backends

            role = iam_backends[MOTO_ACCOUNT]["aws"].get_role(name)
            role.create_date -= datetime.timedelta(seconds=age_s)
        return arn

    def stop(self) -> None:
        try:
            self.ctrl.close()  # kill running handlers, join the Event workers
        finally:
            if self._server is not None:
                self._server.stop()
            self.ctrl.uninstall()

    def __enter__(self) -> MotoLambdaServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
