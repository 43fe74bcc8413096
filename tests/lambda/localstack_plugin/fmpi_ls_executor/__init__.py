"""LocalStack Lambda runtime executor ``fmpi-process``: functions run as local awslambdaric processes.

Installed (editable) into the LocalStack virtual environment by
scripts/localstack-stage.sh; selected with LAMBDA_RUNTIME_EXECUTOR=fmpi-process.
"""
