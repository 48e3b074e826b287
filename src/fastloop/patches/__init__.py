"""The patch records, one module each, registered in default-set order."""

from fastloop._registry import register
from fastloop.patches import add_callback

register(add_callback.PATCH)
