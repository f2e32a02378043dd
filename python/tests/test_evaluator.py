"""pstrain.Evaluator's own checks, without a job: bad arguments raise
exceptions that name the problem, and a chief that never answers ends the
evaluator with ConnectionError. (Evaluators in whole jobs: test_examples.py
and the C++ tests/evaluator_integration_test.cc.)"""

import json
import socket

import pytest

import pstrain


def tf_config(task_type="evaluator", chief_port=1):
    return {"cluster": {"chief": [f"127.0.0.1:{chief_port}"], "worker": ["127.0.0.1:2"],
                        "ps": ["127.0.0.1:3"], "evaluator": ["127.0.0.1:4"]},
            "task": {"type": task_type, "index": 0}}


def closed_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_bad_arguments_raise_value_errors(tmp_path):
    with pytest.raises(ValueError, match="'worker'; a pstrain.Evaluator runs an 'evaluator'"):
        pstrain.Evaluator(tf_config("worker"), checkpoint_dir=str(tmp_path))
    with pytest.raises(ValueError, match="needs --checkpoint_dir"):
        pstrain.Evaluator(tf_config(), checkpoint_dir="")
    with pytest.raises(ValueError, match="--best_mode must be auto, max or min"):
        pstrain.Evaluator(tf_config(), checkpoint_dir=str(tmp_path), best_mode="biggest")
    with pytest.raises(ValueError, match="TF_CONFIG"):
        pstrain.Evaluator("{not json", checkpoint_dir=str(tmp_path))
    evaluator = pstrain.Evaluator(json.dumps(tf_config()), checkpoint_dir=str(tmp_path))
    with pytest.raises(ValueError, match="not handed out by this evaluator"):
        evaluator._session.report("ckpt-000000000001", {"accuracy": 1.0})


def test_a_chief_that_never_answers_ends_it_with_connection_error(tmp_path):
    evaluator = pstrain.Evaluator(tf_config(chief_port=closed_port()),
                                  checkpoint_dir=str(tmp_path), poll_interval=0.05,
                                  chief_timeout=0.5, rpc_timeout=0.2)
    with pytest.raises(ConnectionError, match="the chief has not answered"):
        for _ in evaluator.checkpoints():
            pass
