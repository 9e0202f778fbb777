"""SHA-256 of every integer operand of the calibrated six-layer encoder
(:func:`sw.jobs.encoder.encoder_quant`: int8 weights, biases, multipliers, shifts, table
entries), printed by ``python -m tests.support.calibration_digest``. Float fields (real
scales) are left out: their last bits may follow the BLAS summation order harmlessly; the
integer operands are what the NPU and the golden model compute with."""

import dataclasses
import hashlib

import numpy as np


def integer_digest(obj) -> str:
    """Digest of the integer arrays and integers in ``obj`` (dataclasses, dicts, sequences;
    dict keys in sorted order)."""
    h = hashlib.sha256()

    def walk(x) -> None:
        if isinstance(x, np.ndarray):
            if x.dtype.kind in "iu":
                h.update(np.ascontiguousarray(x).tobytes())
        elif dataclasses.is_dataclass(x):
            for f in dataclasses.fields(x):
                walk(getattr(x, f.name))
        elif isinstance(x, dict):
            for k in sorted(x):
                walk(x[k])
        elif isinstance(x, (list, tuple)):
            for v in x:
                walk(v)
        elif isinstance(x, (int, np.integer)) and not isinstance(x, bool):
            h.update(repr(int(x)).encode())
    walk(obj)
    return h.hexdigest()


if __name__ == "__main__":
    from sw.jobs.encoder import encoder_quant
    print(integer_digest(encoder_quant()))
