"""TLS and tokens for a Python task's connections, as the daemons' flags
set them: --tls_cert, --tls_key, --tls_ca, --auth_token_file and
--tls_server_name (see docs/security.md).

A Worker or an Evaluator applies the PSTRAIN_TLS_CERT, PSTRAIN_TLS_KEY,
PSTRAIN_TLS_CA, PSTRAIN_AUTH_TOKEN_FILE and PSTRAIN_TLS_SERVER_NAME
environment variables (pstrain local sets them from its flags, "{task}"
replaced) unless set_security() was called first.
"""

import json
import os

from . import _pstrain

__all__ = ["set_security"]

_ENV = {"tls_cert": "PSTRAIN_TLS_CERT", "tls_key": "PSTRAIN_TLS_KEY", "tls_ca": "PSTRAIN_TLS_CA",
        "auth_token_file": "PSTRAIN_AUTH_TOKEN_FILE",
        "tls_server_name": "PSTRAIN_TLS_SERVER_NAME"}
_set = False


def set_security(*, tls_cert: str = "", tls_key: str = "", tls_ca: str = "",
                 auth_token_file: str = "", tls_server_name: str = "") -> str:
    """Sets the certificate, key, CA, token file and server name every
    connection made from now on uses; call it before creating a Worker or an
    Evaluator. Returns a description ("mutual TLS, token"). Raises
    ValueError for a certificate without its key, a file that is not PEM, a
    token without TLS; LookupError for a file that cannot be read."""
    global _set
    description = _pstrain.set_security(tls_cert, tls_key, tls_ca, auth_token_file,
                                        tls_server_name)
    _set = True
    return description


def _tf_config_text(tf_config) -> str:
    """TF_CONFIG as JSON text: `tf_config` (a dict or text), or the
    environment variable. ValueError when neither is given."""
    if tf_config is None:
        tf_config = os.environ.get("TF_CONFIG")
        if not tf_config:
            raise ValueError("TF_CONFIG is not set; pass tf_config= or set the variable")
    if isinstance(tf_config, dict):
        tf_config = json.dumps(tf_config)
    return tf_config


def _from_env() -> None:
    """The PSTRAIN_* variables, unless set_security() was called."""
    if _set:
        return
    values = {name: os.environ.get(var, "") for name, var in _ENV.items()}
    if any(values.values()):
        set_security(**values)
