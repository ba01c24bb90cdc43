"""Dtype names shared by the Python layer and the C++ core."""

from __future__ import annotations

import ml_dtypes
import numpy as np

SUPPORTED = (
    "bool",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float16",
    "bfloat16",
    "float32",
    "float64",
)


def numpy_dtype(name: str) -> np.dtype:
    """The numpy dtype for a core dtype name (bfloat16 comes from ml_dtypes)."""
    if name == "bfloat16":
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def dtype_name(dtype: np.dtype, what: str) -> str:
    """The core's name for a numpy dtype; ValueError naming `what` if unsupported."""
    name = np.dtype(dtype).name
    if name not in SUPPORTED:
        raise ValueError(
            f"{what}: unsupported dtype '{name}'; expected one of {', '.join(SUPPORTED)}"
        )
    return name


def text_message(where: str, found: str) -> str:
    """What a text column is told: jaxbatch batches numbers, so text is
    tokenized into ids first. The one place the hint is written."""
    return (
        f"{where}: holds text ({found}), but jaxbatch batches numbers; tokenize the text into "
        f"token ids first: jb.tokenize(source, output_folder, tokenizer) (or `jaxbatch "
        f"tokenize`) writes them, once, to a folder a jb.Loader reads (docs/text.md)"
    )


def is_text_dtype(dtype: np.dtype) -> bool:
    """Whether numpy `dtype` holds strings or bytes."""
    return np.dtype(dtype).kind in "US"


def as_bytes(array: np.ndarray) -> np.ndarray:
    """A flat uint8 view of a C-contiguous array (no copy)."""
    return np.ascontiguousarray(array).reshape(-1).view(np.uint8)
