"""Imported at start-up by a Python whose PYTHONPATH starts with this folder
(tests/test_golden_sum_order.py): every built-in `sum` and 1-D `numpy.sum` adds its terms in
the reverse order. Floating-point addition is not associative, so this moves the last digits
of sums the way another CPU, BLAS or numpy build can (issue 58: a golden test failed on an AMD
host at 1.8e-12 relative); the golden comparisons must still pass."""

import builtins

_sum = builtins.sum


def _reversed_sum(iterable, /, start=0):
    return _sum(reversed(list(iterable)), start)


builtins.sum = _reversed_sum

try:
    import numpy as _np

    _np_sum = _np.sum

    def _np_reversed_sum(a, *args, **kwargs):
        arr = _np.asarray(a)
        if arr.ndim == 1 and not args and kwargs.get("axis") in (None, 0):
            arr = arr[::-1]  # [n] terms, last first
        return _np_sum(arr, *args, **kwargs)

    _np.sum = _np_reversed_sum
except ImportError:  # numpy is a dependency; without it only `sum` is reversed
    pass
