"""The dtypes statickernel moves and computes on, and how many bytes their elements take:
the same for every back-end."""

# The dtypes that sk.dot multiplies and nothing else may load.
DOT_ONLY_DTYPES: tuple[str, ...] = ("float8_e4m3fn", "float8_e5m2")
# Dtypes packed below a byte an element: a body may only cast them (`w.astype(jnp.bfloat16)`).
SUB_BYTE_DTYPES: dict[str, int] = {"int4": 4, "uint4": 4}
# Dtypes that statickernel moves and computes on, in the order it prefers
# when an annotation allows several (used for the import-time trace).
SUPPORTED_DTYPES: tuple[str, ...] = (
    "float32",
    "bfloat16",
    "float16",
    "int32",
    "int16",
    "int8",
    "uint32",
    "uint16",
    "uint8",
    # Only sk.dot reads these: the tensor cores multiply them.
    *DOT_ONLY_DTYPES,
    # Only a cast reads these (quantized weights).
    *SUB_BYTE_DTYPES,
)


def bits(dtype_name: str) -> int:
    """The bits of one element: 4 for int4, whose elements pack two to a byte."""
    return SUB_BYTE_DTYPES.get(dtype_name) or _np_dtype(dtype_name).itemsize * 8


def nbytes(count: int, dtype_name: str) -> int:
    """The bytes `count` elements take in memory (a sub-byte dtype packs them)."""
    return -(-count * bits(dtype_name) // 8)


def per_bytes(byte_count: int, dtype_name: str) -> int:
    """How many elements fill `byte_count` bytes."""
    return byte_count * 8 // bits(dtype_name)


def round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _np_dtype(dtype_name: str):
    import jax.numpy as jnp

    return jnp.dtype(dtype_name)


def widest(dtypes: tuple[str, ...]) -> str:
    """The dtype of the most bits among `dtypes`."""
    return max(dtypes, key=bits)
