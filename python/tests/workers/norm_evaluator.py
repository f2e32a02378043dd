"""A Python evaluator for the tests: each checkpoint's L2 norm over every
tensor of its export (pstrain.Checkpoint.tensors), reported as "l2_norm"."""

import numpy as np

import pstrain


def evaluate(checkpoint):
    tensors = checkpoint.tensors()
    total = sum(float(np.square(t.astype(np.float64)).sum()) for t in tensors.values())
    return {"l2_norm": float(np.sqrt(total)), "tensors": len(tensors)}


if __name__ == "__main__":
    pstrain.Evaluator.from_env(poll_interval=0.2).run(evaluate)
