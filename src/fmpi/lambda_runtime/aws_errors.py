"""AWS errors as one line that names the cause and what to do (for fmpirun, and for ranks that invoke ranks)."""

from __future__ import annotations


def explain(exc: BaseException, action: str) -> str:
    """One line saying why `action` failed and what to do, for the errors people actually hit."""
    import botocore.exceptions as bx

    if isinstance(exc, bx.NoCredentialsError):
        return f"cannot {action}: no AWS credentials (run `aws configure`, or pass --profile)"
    if isinstance(exc, bx.EndpointConnectionError):
        return (
            f"cannot {action}: cannot reach {exc.kwargs.get('endpoint_url')}: check --region, your network, "
            "or (for --backend localstack) that LocalStack is running"
        )
    if isinstance(exc, (bx.ConnectTimeoutError, bx.ReadTimeoutError)):
        return f"cannot {action}: the AWS endpoint timed out ({exc})"
    if isinstance(exc, bx.ClientError):
        error = exc.response.get("Error", {})
        code, message = error.get("Code", "?"), error.get("Message", str(exc))
        if code in (
            "UnrecognizedClientException", "InvalidClientTokenId", "InvalidSignatureException",
            "SignatureDoesNotMatch", "ExpiredToken", "ExpiredTokenException", "AuthFailure",
        ):
            return f"cannot {action}: AWS rejected the credentials ({code}: {message}); refresh them or pick another --profile"
        if code in ("AccessDeniedException", "AccessDenied"):
            return f"cannot {action}: access denied ({message}); the identity running fmpirun needs the permissions in docs/lambda.md"
        if code == "InvalidParameterValueException" and "role" in message.lower():
            return (
                f"cannot {action}: {message} The execution role must exist and trust lambda.amazonaws.com "
                "(docs/lambda.md shows how to create it); pass it with --role"
            )
        if code in ("RequestEntityTooLargeException", "CodeStorageExceededException"):
            return f"cannot {action}: the function is too large ({code}: {message})"
        if code == "TooManyRequestsException":
            return f"cannot {action}: throttled by Lambda ({message}); the account's concurrency or request rate is exhausted"
        return f"cannot {action}: {code}: {message}"
    return f"cannot {action}: {type(exc).__name__}: {exc}"
