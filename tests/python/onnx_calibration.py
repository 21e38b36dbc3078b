"""What the ONNX-in tests share: ORT's CalibrationDataReader over a list of samples, and
SQNR. Imported after the tests' importorskip of onnxruntime."""

import numpy as np
from onnxruntime import quantization


class Reader(quantization.CalibrationDataReader):
    """Feeds `samples` to the model input `name`, one per get_next, as ORT's examples do."""

    def __init__(self, name, samples):
        self.feeds = iter([{name: x} for x in samples])

    def get_next(self):
        return next(self.feeds, None)


def sqnr(reference, y):
    return float(10 * np.log10((reference ** 2).sum() / ((reference - y) ** 2).sum()))
