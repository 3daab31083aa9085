#!/usr/bin/env python3
"""Write testdata/realmodel/small.safetensors with the reference `safetensors`
library, for models/safetensors_test.go. Every tensor holds a closed-form
pattern the Go test recomputes: value(i) = (i % 7) - 3 + i/8 (as the dtype
allows; bool: i % 3 == 0), with i the flat row-major index.

    .tools/tok-venv/bin/pip install safetensors numpy   # (tokenizer_cases.py makes the venv)
    .tools/tok-venv/bin/python testdata/realmodel/safetensors_fixture.py
"""
import os

import numpy as np
from safetensors.numpy import save_file

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def pattern(shape, dtype):
    n = int(np.prod(shape)) if shape else 1
    i = np.arange(n)
    if dtype == np.bool_:
        v = i % 3 == 0
    elif np.issubdtype(dtype, np.floating):
        v = (i % 7) - 3 + i / 8
    else:
        v = (i % 7) - 3 if np.issubdtype(dtype, np.signedinteger) else i % 7
    return np.asarray(v).astype(dtype).reshape(shape)


tensors = {
    "f32.matrix": pattern((3, 5), np.float32),
    "f64.vector": pattern((4,), np.float64),
    "f16.cube": pattern((2, 2, 3), np.float16),
    "i64.ids": pattern((1, 6), np.int64),
    "i32.scalar": pattern((), np.int32),
    "u8.bytes": pattern((9,), np.uint8),
    "bool.mask": pattern((2, 4), np.bool_),
    "f32.empty": pattern((0, 3), np.float32),
}
dst = os.path.join(ROOT, "testdata", "realmodel", "small.safetensors")
os.makedirs(os.path.dirname(dst), exist_ok=True)
save_file(tensors, dst, metadata={"format": "np"})
print("wrote", dst)
