"""Import rliable 1.2.0 under pandas 3.

rliable 1.2.0 needs arch < 8, and every arch < 8 calls pandas' private
``deprecate_kwarg`` in the pandas-2 form ``(old_name, new_name)`` at import time; the
shim accepts that form for the duration of the import only."""


def import_rliable():
    """``(rliable.library, rliable.metrics)``."""
    import pandas.util._decorators as decorators

    original = decorators.deprecate_kwarg

    def compatible(*args, **kwargs):
        if args and isinstance(args[0], str):  # pandas < 3 form: (old_name, new_name)
            args = (FutureWarning, *args)
        return original(*args, **kwargs)

    decorators.deprecate_kwarg = compatible
    try:
        from rliable import library, metrics
    finally:
        decorators.deprecate_kwarg = original
    return library, metrics
